"""What every benchmark script shares: a free loopback port, and its own section of benchmarks/REPORT.md."""
from __future__ import annotations

import socket
from pathlib import Path

REPORT = Path(__file__).resolve().parent / "REPORT.md"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
