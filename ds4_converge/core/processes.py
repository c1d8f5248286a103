"""The process table as /proc shows it: who is whose parent, who is in which process group, what each runs.

The one place that walks /proc: stopping an engine waits for its whole process group, a port holder is ours
when it descends from a program our supervisord runs, and the tests find engines by their command line.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

PROC = Path("/proc")


class Process(NamedTuple):  # not a dataclass: the no-op receipt reads /proc here, and its start-up counts
    pid: int
    ppid: int
    pgid: int
    state: str  # R, S, D, Z (zombie), …
    started: int  # clock ticks after boot: with the pid, which process this is (a reused pid starts later)


def parse_stat(pid: int, text: str) -> Process:
    """`/proc/PID/stat` -> Process. The command name sits in parentheses and may hold spaces or ')'."""
    fields = text.rsplit(")", 1)[1].split()
    return Process(pid=pid, state=fields[0], ppid=int(fields[1]), pgid=int(fields[2]), started=int(fields[19]))


def parse_cpu_ticks(text: str) -> int:
    """`/proc/PID/stat` -> the CPU time all its threads used, user and system, in clock ticks (utime + stime)."""
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def cpu_ticks(pid: int) -> int | None:
    """The CPU time the process used so far (clock ticks); None when it is gone (or /proc hides it)."""
    try:
        return parse_cpu_ticks((PROC / str(pid) / "stat").read_text())
    except (OSError, IndexError, ValueError):
        return None


def read(pid: int) -> Process | None:
    """The process now, or None when it is gone (or /proc hides it)."""
    try:
        return parse_stat(pid, (PROC / str(pid) / "stat").read_text())
    except (OSError, IndexError, ValueError):
        return None


def start_time(pid: int) -> int | None:
    """When a live process started (see Process.started); None when it is gone or a zombie."""
    process = read(pid)
    return process.started if process is not None and process.state != "Z" else None


def every() -> Iterator[Process]:
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            process = read(int(entry.name))
            if process is not None:
                yield process


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) members of a process group: what still holds the engine's memory."""
    return [p.pid for p in every() if p.pgid == pgid and p.state != "Z"]


def lineage(pid: int) -> list[int]:
    """The pid, its parent, its parent's parent … up to init: a few reads, not a walk of all of /proc."""
    chain, seen = [], set()
    while pid > 0 and pid not in seen:
        chain.append(pid)
        seen.add(pid)
        process = read(pid)
        if process is None:
            break
        pid = process.ppid
    return chain


def descending_from(candidates: Iterable[int], roots: Iterable[int]) -> set[int]:
    """Those candidates that are one of the roots or run below one (the env wrapper execs, but forks happen)."""
    roots = set(roots)
    return {pid for pid in candidates if roots.intersection(lineage(pid))} if roots else set()


def running_under(directory: Path, *, argv: int = 3) -> list[int]:
    """Live processes of this user whose executable, or one of their first `argv` arguments (the script an
    interpreter runs, what an env wrapper execs), lies under `directory`: the engines of a root's releases."""
    prefix = os.fsencode(os.path.realpath(directory)) + b"/"
    found = []
    for process in every():
        if process.state == "Z" or not _own(process.pid):
            continue
        try:
            exe = os.fsencode(os.path.realpath(PROC / str(process.pid) / "exe"))
        except OSError:  # a process /proc does not show us
            exe = b""
        args = [arg for arg in cmdline(process.pid)[:argv] if arg.startswith(b"/")]
        if exe.startswith(prefix) or any(os.fsencode(os.path.realpath(arg)).startswith(prefix) for arg in args):
            found.append(process.pid)
    return found


def running_argv(tail: list[bytes]) -> list[int]:
    """Live processes of this user whose command line ends with `tail`."""
    return [p.pid for p in every() if p.state != "Z" and cmdline(p.pid)[-len(tail) - 1:-1] == tail
            and _own(p.pid)]


def running_with(args: list[bytes]) -> list[int]:
    """Live processes of this user whose command line holds `args` in a row, wherever (HAProxy's master adds
    arguments of its own after its first start: -sf, -x)."""
    width = len(args)
    return [p.pid for p in every() if p.state != "Z" and _own(p.pid)
            and any(line[i:i + width] == args for line in [cmdline(p.pid)] for i in range(len(line) - width + 1))]


def _own(pid: int) -> bool:
    try:
        return os.stat(PROC / str(pid)).st_uid == os.getuid()
    except OSError:
        return False


def cmdline(pid: int) -> list[bytes]:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


# what a stopped process gives back that MemAvailable does not already count: its anonymous and shared memory,
# and the pages it pinned (cudaHostRegister pins the model mapping: VmPin); its clean file pages are page cache,
# which MemAvailable counts already
RETURNED_FIELDS = ("RssAnon", "RssShmem", "VmPin")


def parse_returned_bytes(text: str) -> int:
    """`/proc/PID/status` -> bytes of RETURNED_FIELDS (kB lines); 0 when none is there (a kernel thread)."""
    total = 0
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in RETURNED_FIELDS:
            parts = rest.split()
            if parts and parts[0].isdigit():
                total += int(parts[0]) * 1024
    return total


def returned_bytes(pids: Iterable[int]) -> int:
    """What these processes and the members of their process groups give back when they stop."""
    groups = {p.pgid for p in map(read, pids) if p is not None}
    members = {pid for pgid in groups for pid in group_members(pgid)} | set(pids)
    total = 0
    for pid in members:
        try:
            total += parse_returned_bytes((PROC / str(pid) / "status").read_text())
        except OSError:
            continue
    return total
