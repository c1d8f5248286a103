"""What every benchmark script shares: a free loopback port, the simulated engine's repository, the machine a
report was measured on, and its own section of benchmarks/REPORT.md."""
from __future__ import annotations

import importlib.util
import os
import platform
import socket
from datetime import date
from pathlib import Path

REPORT = Path(__file__).resolve().parent / "REPORT.md"
REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def build_sim_repo(dest: Path) -> Path:
    """The simulated engine's git repository (engine/make_sim_repo.py, what the tests' sim_repo fixture builds)."""
    spec = importlib.util.spec_from_file_location("make_sim_repo", REPO / "engine" / "make_sim_repo.py")
    make_sim_repo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_sim_repo)
    make_sim_repo.build(dest)
    return dest


def measured_on(script: str | None = None) -> str:
    """Which script measured (when named), when, on what: the words every report's first line starts with."""
    return (f"{f'`benchmarks/{script}`, ' if script else ''}{date.today()}, {platform.machine()}, "
            f"{os.cpu_count()} CPUs, Python {platform.python_version()}")


def write_section(heading: str, text: str, report: Path = REPORT) -> None:
    """Replace the section under `heading` (up to the next `## `) with `text`; every other section stays as it
    is. A section not there yet goes at the end."""
    current = report.read_text() if report.exists() else "# Benchmark report\n\n"
    if heading in current:
        before, _, rest = current.partition(heading)
        after = rest[rest.find("\n## "):].lstrip("\n") if "\n## " in rest else ""
        current = before + text.rstrip("\n") + "\n" + ("\n" + after if after else "")
    else:
        current = current.rstrip("\n") + "\n\n" + text.rstrip("\n") + "\n"
    report.write_text(current)
