"""Busy or hung: what the engine was doing while a check of the watchdog went unanswered.

A check that does not answer in time is not yet a failure: upstream ds4-server has one worker thread (b030961
`ds4_server.c` `worker_main`), so a one-token completion waits behind a 200K-token prefill, and a box that
computes hard may answer /v1/models late. Between two looks the watchdog samples what an engine at work shows
from outside, whatever engine it is:

- requests in flight: the connections the engine holds on its port (`/proc/net/tcp`, ESTABLISHED or
  CLOSE_WAIT: a client that went away still holds the engine's work), or the front door's current sessions of
  the serving slot;
- progress: its CPU time advancing (`/proc/PID/stat`: a wedged or SIGSTOPped engine uses none), its log growing
  (the real engine logs every prefill chunk and every ~50 decoded tokens), bytes flowing to clients (the front
  door's bytes out of the serving slot).

Requests in flight with progress: busy. No progress: hung (after `failures` such looks). The front door's
answers also tell a poisoned engine from a busy one: 5xx rising while no 2xx does.

Pure parsers (:func:`parse_connections`, :func:`parse_front_stat`) and the judgement (:func:`judge`) are tested
on fixtures; :func:`sample` reads the host.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ds4_converge.core import processes

# connection states that hold engine work (/proc/net/tcp `st`, hex): ESTABLISHED, and CLOSE_WAIT: the client
# closed (a timed-out check, an impatient user) but the engine has not finished with it yet
HOLDING_WORK = {"01", "08"}
TCP_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))


def parse_connections(text: str, port: int) -> int:
    """`/proc/net/tcp` (or tcp6) -> the connections accepted on `port` that hold work."""
    count = 0
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4:
            continue
        local, state = fields[1], fields[3]
        try:
            if int(local.rsplit(":", 1)[1], 16) == port and state in HOLDING_WORK:
                count += 1
        except (IndexError, ValueError):
            continue
    return count


def connections(port: int, tables=TCP_TABLES) -> int | None:
    """Requests in flight on the engine's port (None: no table readable)."""
    total, read_any = 0, False
    for table in tables:
        try:
            total += parse_connections(table.read_text(), port)
            read_any = True
        except OSError:
            continue
    return total if read_any else None


@dataclass(frozen=True)
class FrontSlot:
    """What HAProxy counted for one engine slot (`show stat`): sessions now, bytes out, answers by class."""
    sessions: int
    bytes_out: int
    answers_2xx: int
    answers_5xx: int


def parse_front_stat(csv: str, backend: str, server: str) -> FrontSlot | None:
    """HAProxy's `show stat` CSV -> the counters of `backend`/`server` (None when it is not there)."""
    lines = csv.splitlines()
    if not lines or not lines[0].startswith("# "):
        return None
    header = lines[0][2:].split(",")
    for line in lines[1:]:
        row = dict(zip(header, line.split(",")))
        if row.get("pxname") == backend and row.get("svname") == server:
            def number(key: str) -> int:
                try:
                    return int(row.get(key) or 0)
                except ValueError:
                    return 0
            return FrontSlot(sessions=number("scur"), bytes_out=number("bout"), answers_2xx=number("hrsp_2xx"),
                             answers_5xx=number("hrsp_5xx"))
    return None


@dataclass(frozen=True)
class Sample:
    at: float                       # monotonic seconds
    cpu_ticks: int | None = None    # the engine's CPU time (None: not readable, gone)
    log_bytes: int | None = None    # the engine's log size
    in_flight: int | None = None    # connections holding work on its port
    front: FrontSlot | None = None  # the front door's counters of the serving slot


def sample(at: float, pid: int | None, port: int | None, log: Path | None,
           front_stat=None) -> Sample:
    """What the engine shows now. front_stat: a callable returning the serving slot's FrontSlot (or None)."""
    try:
        log_bytes = os.stat(log).st_size if log else None
    except OSError:
        log_bytes = None
    try:
        front = front_stat() if front_stat else None
    except OSError:  # the front door restarting: its counters are for the next look
        front = None
    return Sample(at=at, cpu_ticks=processes.cpu_ticks(pid) if pid else None, log_bytes=log_bytes,
                  in_flight=connections(port) if port else None, front=front)


@dataclass(frozen=True)
class Judgement:
    in_flight: int   # requests in flight now (the most either count says)
    progressed: bool  # CPU time, log or bytes out moved since the sample before
    poisoned: bool   # the front door counted 5xx answers from the slot and no 2xx since the sample before
    words: str       # "1 request in flight, 0.8 s of CPU time, 3.2 MB sent in the last 10 s"
    known: bool = True  # False at the first look: no sample before, progress cannot be told yet

    @property
    def busy(self) -> bool:
        return self.in_flight > 0 and self.progressed and not self.poisoned


def _delta(before, after) -> int:
    return after - before if before is not None and after is not None else 0


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def judge(before: Sample | None, after: Sample, ticks_per_s: int | None = None) -> Judgement:
    """What happened between two samples (before None: the first look; nothing is known to have moved)."""
    in_flight = max(after.in_flight or 0, after.front.sessions if after.front else 0)
    if before is None:
        return Judgement(in_flight, False, False, f"{_requests(in_flight)} in flight", known=False)
    ticks_per_s = ticks_per_s or os.sysconf("SC_CLK_TCK")
    cpu = _delta(before.cpu_ticks, after.cpu_ticks)
    log = _delta(before.log_bytes, after.log_bytes)
    sent = _delta(before.front.bytes_out, after.front.bytes_out) if before.front and after.front else 0
    ok = _delta(before.front.answers_2xx, after.front.answers_2xx) if before.front and after.front else 0
    bad = _delta(before.front.answers_5xx, after.front.answers_5xx) if before.front and after.front else 0
    seen = [f"{_requests(in_flight)} in flight"]
    if cpu > 0:
        seen.append(f"{cpu / ticks_per_s:.1f} s of CPU time")
    if log > 0:
        seen.append(f"{_size(log)} of log")
    if sent > 0:
        seen.append(f"{_size(sent)} sent")
    if bad > 0:
        seen.append(f"{bad} 5xx answer(s) and {ok} 2xx at the front door")
    span = after.at - before.at
    words = ", ".join(seen) + (f" in the last {span:.0f} s" if len(seen) > 1 else
                               f", and no progress (CPU time, log, bytes sent) in the last {span:.0f} s")
    return Judgement(in_flight, progressed=cpu > 0 or log > 0 or sent > 0, poisoned=bad > 0 and ok == 0,
                     words=words)


def _requests(n: int) -> str:
    return f"{n} request{'' if n == 1 else 's'}"
