"""Run the commands that change the host (git, make, supervisord). Facts have their own read-only executor."""
from __future__ import annotations

import os
import signal
import subprocess
from collections import deque
from pathlib import Path

from ds4_converge.errors import Ds4Error

# What a `make` that runs the tool (make run) tells its sub-makes: its flags, variables, depth and jobserver. The
# tool's own commands are never such sub-makes (the engine's build is a make of its own, with its own -j), so they
# do not get them, and a run under make does the same as one from a shell (the no-op receipt ignores them too).
CALLER_MAKE_ENV = frozenset({"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "MAKE_TERMOUT", "MAKE_TERMERR"})


class CommandFailed(Ds4Error):
    """A command exited non-zero, could not start, or ran past its timeout (`returncode` None then)."""

    def __init__(self, argv: list[str], returncode: int | None, tail: str, *, timed_out: float | None = None):
        if timed_out is not None:
            self.what = f"timed out after {timed_out:.0f}s"
        else:
            self.what = f"exited {returncode}" if returncode is not None else "could not be started"
        super().__init__(f"{' '.join(argv[:3])}… {self.what}", tail)
        self.argv, self.returncode, self.tail, self.timed_out = argv, returncode, tail, timed_out


def run(argv: list[str], *, cwd: Path | None = None, env: dict | None = None, log: Path | None = None,
        timeout: float | None = None, input: bytes | None = None, as_user: tuple[int, int] | None = None) -> str:
    """Run argv; return stdout (or append it to `log`). Raise CommandFailed with the output's tail.

    The command gets its own process group, so a timeout kills make's compilers and git's helpers too, not
    only the direct child (they would keep writing into a tree we are about to remove). as_user: (uid, gid) it
    runs as, with no other group (root only); it enters `cwd` before it drops privileges, so it needs no right
    on the folders above."""
    full_env = {k: v for k, v in os.environ.items() if k not in CALLER_MAKE_ENV} | (env or {})
    who = {"user": as_user[0], "group": as_user[1], "extra_groups": []} if as_user else {}
    if log is None:
        stdout, code = _run(argv, cwd, full_env, timeout, input, subprocess.PIPE, subprocess.PIPE, **who)
        if code:
            raise CommandFailed(argv, code, (stdout[1] or stdout[0]).decode(errors="replace")[-4000:])
        return stdout[0].decode(errors="replace")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as handle:
        handle.write(f"$ {' '.join(argv)}\n".encode())
        handle.flush()
        _, code = _run(argv, cwd, full_env, timeout, input, handle, subprocess.STDOUT, log=log, **who)
    if code:
        raise CommandFailed(argv, code, tail(log))
    return ""


def _run(argv, cwd, env, timeout, input, stdout, stderr, log: Path | None = None, **who):
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=stdout, stderr=stderr,
                                stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                start_new_session=True, **who)
    except OSError as exc:
        raise CommandFailed(argv, None, f"cannot run {argv[0]}: {exc.strerror or exc}") from None
    try:
        out = proc.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out = proc.communicate()
        text = tail(log) if log else (out[1] or out[0] or b"").decode(errors="replace")[-4000:]
        raise CommandFailed(argv, None, text, timed_out=timeout) from None
    except BaseException:
        _kill_group(proc)  # interrupted: leave no half-finished command behind
        proc.wait()
        raise
    return out, proc.returncode


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def tail(path: Path, lines: int = 30) -> str:
    try:
        with open(path, errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines))
    except OSError:
        return ""
