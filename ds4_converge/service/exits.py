"""Why an engine exited, for the watchdog's incidents: its signal, and whether the kernel's OOM killer sent it.

supervisord's XML-RPC gives a signalled exit as exit status -1 (the signal is lost); its log line keeps it
("exited: ds4 (terminated by SIGKILL; not expected)"). A SIGKILL may be the kernel's OOM killer: its log names
the PID ("Out of memory: Killed process 1234 (ds4-server)", "oom-kill:…,pid=1234,…"). The kernel log is read
where this user may read it (/dev/kmsg; kernel.dmesg_restrict=1 keeps it from non-root): elsewhere the answer
is "unknown", never a guess. Pure parsers, tested on fixtures, and two readers.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

KMSG = Path("/dev/kmsg")
TAIL_BYTES = 65536


def parse_exit(log_text: str, name: str) -> dict:
    """supervisord's log -> {"signal": "SIGKILL"} or {"exit_status": 1} for the last exit of `name` ({}: none)."""
    found = re.findall(rf"exited: {re.escape(name)} \((terminated by (SIG[A-Z0-9]+)|exit status (-?\d+))",
                       log_text)
    if not found:
        return {}
    _, signal, status = found[-1]
    return {"signal": signal} if signal else {"exit_status": int(status)}


def oom_killed(kernel_log: str, pid: int) -> bool:
    """Does the kernel log say its OOM killer killed `pid`?"""
    return re.search(rf"(Killed process {pid}\b|oom-kill:\S*\bpid={pid}\b|oom_reaper: reaped process {pid}\b)",
                     kernel_log) is not None


def tail(path: Path, size: int = TAIL_BYTES) -> str | None:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            handle.seek(max(0, handle.tell() - size))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return None


def kernel_log(kmsg: Path = KMSG, most: int = 20000) -> str | None:
    """The kernel's ring buffer as this user may read it; None where it may not (or there is none)."""
    try:
        fd = os.open(kmsg, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    records = []
    try:
        for _ in range(most):
            try:
                records.append(os.read(fd, 8192).decode("utf-8", "replace"))
            except BlockingIOError:  # the end of the buffer
                break
            except BrokenPipeError:  # a record overwritten while reading: the next one follows
                continue
            except OSError:
                return None if not records else "".join(records)
    finally:
        os.close(fd)
    return "".join(records)


def oom_words(pid: int | None, kernel: str | None) -> str:
    """"yes", "no" or "unknown" (the kernel log is not readable here, or no PID is known)."""
    if pid is None or kernel is None:
        return "unknown"
    return "yes" if oom_killed(kernel, pid) else "no"
