"""The CUDA toolkit a build uses: chosen by the toolchain role, built with by the engine role, checked by
preflight. Plain data of the ground, so the roles share it through the Context without importing each other."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Toolkit:
    """`nvcc` None for cpu builds."""

    nvcc: str | None = None
    cuda_home: str | None = None
    version: str | None = None

    @property
    def tag(self) -> str:
        if not self.nvcc:
            return "nocuda"
        digest = hashlib.sha256(f"{os.path.realpath(self.nvcc)}|{self.version}".encode()).hexdigest()[:6]
        return f"nvcc{self.version}-{digest}"
