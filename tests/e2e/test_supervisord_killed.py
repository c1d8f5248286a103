"""supervisord SIGKILLed (the OOM killer can take it too): the engine and the switch guard it started live on,
orphaned. The tool must not be stuck on what it started itself: the next run replaces them cleanly and serves
again, and `stop` stops them. Real supervisord, the simulated engine, the real CLI."""
from __future__ import annotations

import os
import signal
import time

import pytest

from boxes import engine_pids
from ds4_converge.service import processes

pytestmark = pytest.mark.slow


def guard_pids(root) -> set[int]:
    """The switch guard of this root (python -m ds4_converge.service.guard ROOT)."""
    return {p.pid for p in processes.every()
            if processes.cmdline(p.pid)[-3:-1] == [b"ds4_converge.service.guard", str(root).encode()]}


def kill_supervisord(box) -> tuple[set[int], set[int]]:
    """SIGKILL this root's supervisord; what it ran (the engine, the guard) lives on. Returns their pids."""
    engines, guards = engine_pids(box.root), guard_pids(box.root)
    assert engines and guards, (engines, guards)
    pid = int((box.root / "run" / "supervisord.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while processes.start_time(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine_pids(box.root) == engines and guard_pids(box.root) == guards  # orphaned, not gone
    return engines, guards


def gone(pids: set[int]) -> bool:
    return all(processes.start_time(pid) is None for pid in pids)


def test_the_next_run_replaces_what_a_killed_supervisord_left_and_serves(box):
    rc, first = box.converge()
    assert rc == 0, first
    engines, guards = kill_supervisord(box)
    rc, status = box.json("status", str(box.spec_path))
    assert rc == 1 and status["healthy"] is False, status
    assert "is gone, but what it started still runs unsupervised" in status["error"], status
    assert all(str(pid) in status["error"] for pid in engines | guards), status
    rc, document = box.converge()
    assert rc == 0 and document["ok"], document
    assert "not manage" not in str(document)
    assert gone(engines) and gone(guards), (engines, guards)  # stopped, not left beside the new ones
    status = box.status()
    assert status["healthy"] is True and status["pid"] not in engines, status
    assert status["release"] == first["release"]


def test_stop_stops_what_a_killed_supervisord_left(box):
    rc, first = box.converge()
    assert rc == 0, first
    engines, guards = kill_supervisord(box)
    proc = box.cli("stop", str(box.spec_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert gone(engines) and gone(guards), (engines, guards)
    assert engine_pids(box.root) == set() and guard_pids(box.root) == set()
