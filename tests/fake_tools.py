"""Fake host tools (nvidia-smi, nvcc) written as small shell scripts, shared by the facts and preflight tests."""
from __future__ import annotations

from pathlib import Path

SMI_HEADER = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI {driver:<22} Driver Version: {driver:<14} CUDA Version: {cuda:<8}|
+-----------------------------------------+------------------------+----------------------+
|   0  {name:<34}On  |   0000000F:01:00.0  On |                  N/A |
+-----------------------------------------+------------------------+----------------------+
"""


def write_exe(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path
