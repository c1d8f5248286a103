"""Run the commands that change the host (git, make, supervisord). Facts have their own read-only executor."""
from __future__ import annotations

import os
import subprocess
from collections import deque
from pathlib import Path

from ds4_converge.errors import Ds4Error


class CommandFailed(Ds4Error):
    def __init__(self, argv: list[str], returncode: int, tail: str):
        super().__init__(f"{' '.join(argv[:3])}… exited {returncode}", tail)
        self.argv, self.returncode, self.tail = argv, returncode, tail


def run(argv: list[str], *, cwd: Path | None = None, env: dict | None = None, log: Path | None = None,
        timeout: float | None = None, input: bytes | None = None) -> str:
    """Run argv; return stdout (or append it to `log`). Raise CommandFailed with the output's tail."""
    full_env = {**os.environ, **(env or {})}
    if log is None:
        proc = subprocess.run(argv, cwd=cwd, env=full_env, capture_output=True, timeout=timeout, input=input)
        if proc.returncode:
            raise CommandFailed(argv, proc.returncode, (proc.stderr or proc.stdout).decode(errors="replace")[-4000:])
        return proc.stdout.decode(errors="replace")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as handle:
        handle.write(f"$ {' '.join(argv)}\n".encode())
        handle.flush()
        proc = subprocess.run(argv, cwd=cwd, env=full_env, stdout=handle, stderr=subprocess.STDOUT,
                              timeout=timeout, input=input)
    if proc.returncode:
        raise CommandFailed(argv, proc.returncode, tail(log))
    return ""


def tail(path: Path, lines: int = 30) -> str:
    try:
        with open(path, errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines))
    except OSError:
        return ""
