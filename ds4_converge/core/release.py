"""What a built engine release is, and what asks for one to be built: values the engine role makes (it builds
and loads them: :mod:`ds4_converge.engine.release`) and the service and health roles read (the command line, the
rules its files are judged by).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ds4_converge.core.toolkit import Toolkit
from ds4_converge.engine_knowledge import BASE as BASE_VERSION
from ds4_converge.engine_knowledge import for_version


@dataclass(frozen=True)
class BuildRequest:
    commit: str
    ref: str
    target: str
    cuda_arch: str | None
    toolkit: Toolkit
    jobs: int

    @property
    def release_id(self) -> str:
        arch = f"-{self.cuda_arch}" if self.target == "cuda" and self.cuda_arch else ""
        return f"{self.commit[:12]}-{self.target}{arch}-{self.toolkit.tag}"

    def make_argv(self) -> list[str]:
        argv = ["make", f"-j{self.jobs}", self.target]
        if self.target == "cuda":
            argv.append(f"CUDA_ARCH={self.cuda_arch}")
        if self.toolkit.nvcc:
            # make's command-line variables beat both `?=` defaults and an exported stale NVCC/CUDA_HOME
            argv += [f"NVCC={self.toolkit.nvcc}", f"CUDA_HOME={self.toolkit.cuda_home}"]
        return argv


@dataclass(frozen=True)
class Release:
    id: str
    path: Path
    commit: str
    ref: str
    target: str
    cuda_arch: str | None
    toolkit: Toolkit
    flags: frozenset[str]
    # how many values each option takes, as its --help shows (empty: unknown, e.g. a test's hand-made release)
    values: Mapping[str, int] = field(default_factory=dict)
    engine: str = BASE_VERSION  # the known engine version whose rules this build is judged by
    engine_why: str = ""

    @property
    def server(self) -> Path:
        return self.path / "ds4-server"

    @property
    def knowledge(self) -> dict:
        return for_version(self.engine)

    def supports(self, flag: str) -> bool:
        return flag in self.flags

    def takes_value(self, flag: str) -> bool | None:
        """Whether the option takes a value, as its --help shows; None where the help did not say."""
        return self.values[flag] > 0 if flag in self.values else None
