"""supervisord SIGKILLed (the OOM killer can take it too): the engine and the switch guard it started live on,
orphaned. The tool must not be stuck on what it started itself: the next run replaces them cleanly and serves
again, and `stop` stops them. Real supervisord, the simulated engine, the real CLI."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest

from boxes import Box, engine_pids, two_free_ports, with_front
from ds4_converge.core import processes
from ds4_converge.facts import programs

pytestmark = pytest.mark.slow


def guard_pids(root) -> set[int]:
    """The switch guard of this root (python -m ds4_converge.service.guard ROOT)."""
    return _helper_pids(root, "ds4_converge.service.guard")


def watchdog_pids(root) -> set[int]:
    """The watchdog of this root (python -m ds4_converge.service.watchdog ROOT)."""
    return _helper_pids(root, "ds4_converge.service.watchdog")


def _helper_pids(root, module: str) -> set[int]:
    return {p.pid for p in processes.every() if processes.cmdline(p.pid)[-3:-1] == [module.encode(), str(root).encode()]}


def kill_supervisord(box) -> tuple[set[int], set[int]]:
    """SIGKILL this root's supervisord; what it ran (the engine, the guard) lives on, the watchdog too for a while.
    Returns the pids of the engine and of the guard and watchdog."""
    engines, helpers = engine_pids(box.root), guard_pids(box.root) | watchdog_pids(box.root)
    assert engines and guard_pids(box.root) and watchdog_pids(box.root), (engines, helpers)
    pid = int((box.root / "run" / "supervisord.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while processes.start_time(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine_pids(box.root) == engines and guard_pids(box.root) <= helpers  # orphaned, not gone
    return engines, helpers


def guards_now(box, helpers: set[int]) -> set[int]:
    return helpers & (guard_pids(box.root) | watchdog_pids(box.root))


def gone(pids: set[int]) -> bool:
    return all(processes.start_time(pid) is None for pid in pids)


def test_the_next_run_replaces_what_a_killed_supervisord_left_and_serves(box):
    rc, first = box.converge()
    assert rc == 0, first
    engines, guards = kill_supervisord(box)
    rc, status = box.json("status", str(box.spec_path))
    assert rc == 1 and status["healthy"] is False, status
    assert "is gone, but what it started still runs unsupervised" in status["error"], status
    assert all(str(pid) in status["error"] for pid in engines | guards_now(box, guards)), status
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
    assert engine_pids(box.root) == set() and guard_pids(box.root) == set() and watchdog_pids(box.root) == set()


def test_the_watchdog_leaves_when_supervisord_is_killed(box):
    """With no supervisord to restart through, an orphaned watchdog would only be a leak: it leaves by itself
    within one of its intervals."""
    box.spec["health"]["watchdog"] = {"interval_s": 0.5}
    box.write()
    rc, first = box.converge()
    assert rc == 0, first
    watchdogs = watchdog_pids(box.root)
    kill_supervisord(box)
    deadline = time.monotonic() + 15
    while not gone(watchdogs) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone(watchdogs), watchdogs


def front_pids(root) -> set[int]:
    """This root's front door: HAProxy reading ROOT/front/haproxy.cfg (master and worker)."""
    config = str(root / "front" / "haproxy.cfg").encode()
    return {p.pid for p in processes.every() if p.state != "Z" and config in processes.cmdline(p.pid)}


@pytest.mark.skipif(programs.haproxy() is None, reason="haproxy is not installed")
def test_a_front_door_that_outlived_its_supervisord_is_known_replaced_and_stopped(tmp_path, sim_repo):
    """HAProxy serves on after supervisord's SIGKILL: status says so (not "down"), the next run is not refused by
    it (it is ours: its config is this root's) and replaces it, and `stop` stops it."""
    box = with_front(Box(tmp_path / "root", sim_repo, two_free_ports()))
    try:
        _front_door_outlives_supervisord(box)
    finally:
        box.stop()


def _front_door_outlives_supervisord(box):
    rc, first = box.converge()
    assert rc == 0, first
    haproxy = front_pids(box.root)
    assert haproxy
    kill_supervisord(box)
    assert front_pids(box.root) == haproxy  # orphaned, serving on
    rc, status = box.json("status", str(box.spec_path))
    assert rc == 1 and status["front"]["up"] is True and status["front"]["points_at"], status
    assert status["front"]["unsupervised_pid"] in haproxy, status
    assert all(str(pid) in status["error"] for pid in haproxy), status
    shown = box.cli("status", str(box.spec_path)).stdout
    assert "down (HAProxy does not run)" not in shown and "unsupervised (HAProxy pid" in shown, shown
    rc, document = box.converge()
    assert rc == 0 and document["ok"], document
    assert "not manage" not in json.dumps(document)
    assert gone(haproxy) and front_pids(box.root), haproxy  # replaced by supervisord's own
    status = box.status()
    assert status["healthy"] is True and status["front"]["up"] and "unsupervised_pid" not in status["front"], status
    haproxy = front_pids(box.root)
    kill_supervisord(box)
    proc = box.cli("stop", str(box.spec_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert gone(haproxy) and front_pids(box.root) == set(), haproxy
