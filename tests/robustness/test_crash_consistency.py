"""Kill a run with SIGKILL at every step boundary (DS4C_CRASH_AT, core/crashpoints.py) and show that
- something serves in between: the guard brings last good back if the run died mid-switch (the stop -> start
  window is closed without anyone running the tool again);
- a plain re-run ends converged and healthy (or reverted to last good, for a broken upgrade);
- there is exactly one supervisord and one engine for the root, no stale lock or switch intent, and no model
  file, KV dir or older release was lost.
"""
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from boxes import FRONT_KEY, MODEL, Box, engine_pids, free_port, two_free_ports, with_front
from ds4_converge.core.crashpoints import ENV, POINTS
from ds4_converge.core.lock import lock_holders
from ds4_converge.facts import programs

REVERT_POINTS = [p for p in POINTS if p.startswith("revert-")]
ROLLBACK_POINTS = [p for p in POINTS if p.startswith("rollback-")]
BESIDE_POINTS = [p for p in POINTS if p.startswith("beside-")]  # a front door's overlap switch
HELD_POINTS = [p for p in POINTS if p.startswith("held-")]  # a front door's held road, after its flip
UPGRADE_POINTS = [p for p in POINTS if p not in REVERT_POINTS + ROLLBACK_POINTS + BESIDE_POINTS + HELD_POINTS]
COLD_POINTS = ["intent", "program-written", "new-started"]


def _box(base: Path, sim_repo: Path, front: bool = False) -> Box:
    box = Box(base / "root", sim_repo, two_free_ports() if front else free_port())
    if front:
        with_front(box)
    box.spec["model"]["main"] = {"source": str(MODEL), "dest": str(base / "models-a")}
    box.spec["server"]["kv_disk_dir"] = str(base / "kv")
    box.spec["health"].update(soak_s=0.5, deadline_s=10)
    box.baseline = dict(box.spec)
    box.write()
    rc, document = box.converge()
    assert rc == 0, document
    box.baseline_release = document["release"]
    box.base = base
    return box


@pytest.fixture(scope="module")
def crash_box(tmp_path_factory, sim_repo):
    box = _box(tmp_path_factory.mktemp("crash"), sim_repo)
    yield box
    box.stop()


@pytest.fixture(scope="module")
def front_crash_box(tmp_path_factory, sim_repo):
    """Behind a front door, where an upgrade loads the new engine beside the serving one (the simulator's model
    fits twice)."""
    box = _box(tmp_path_factory.mktemp("crash-front"), sim_repo, front=True)
    yield box
    box.stop()


def _reset(box: Box, **changes: dict) -> None:
    """Back to the baseline: v0.2.0 serving, no other release built, no second model directory. Then the spec's
    sections updated with `changes` (engine={"ref": "v0.3.0"}) and written: what the next run reads."""
    box.spec = {k: (dict(v) if isinstance(v, dict) else v) for k, v in box.baseline.items()}
    box.spec["engine"] = dict(box.baseline["engine"])
    box.write()
    rc, document = box.converge()
    assert rc == 0 and document["release"] == box.baseline_release, document
    for release in (box.root / "releases").iterdir():
        if release.name != box.baseline_release:
            shutil.rmtree(release)
    shutil.rmtree(box.base / "models-b", ignore_errors=True)
    for section, values in changes.items():
        box.spec[section] = {**box.spec[section], **values}
    box.write()


def _crash(box: Box, point: str, command: tuple = ()) -> None:
    proc = subprocess.run([sys.executable, "-m", "ds4_converge.cli", *command, str(box.spec_path), "--json"],
                          capture_output=True, text=True, timeout=180, env={**_env(), ENV: point})
    assert proc.returncode == -9, f"the run did not reach {point}:\n{proc.stdout}\n{proc.stderr}"


def _crash_upgrading(box: Box, ref: str, point: str) -> None:
    """From the baseline, a run to `ref` killed at `point`: something must serve right after."""
    _reset(box, engine={"ref": ref})
    _crash(box, point)
    assert _serves(box), f"nothing serves after a crash at {point}"


def _env():
    import os
    return {**os.environ, "NO_COLOR": "1"}


def _serves(box: Box, within: float = 30) -> bool:
    """The endpoint clients use answers: the engine's port, or the front door's (with a key)."""
    front = box.spec.get("front")
    url = f"http://127.0.0.1:{front['port']}" if front else box.endpoint
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{url}/v1/models", timeout=2,
                            headers={"Authorization": f"Bearer {FRONT_KEY}"}).status_code == 200:
                return True
        except requests.RequestException:
            pass
        time.sleep(0.2)
    return False


def _supervisords(root: Path) -> list[int]:
    conf = str(root / "supervisor" / "supervisord.conf").encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"supervisor.supervisord" in cmdline and conf in cmdline:
                found.append(int(entry.name))
    return found


def _invariants(box: Box) -> None:
    status = box.status()
    assert status["healthy"], status
    assert len(_supervisords(box.root)) == 1, "exactly one supervisord for the root"
    assert engine_pids(box.root) == {status["pid"]}, "exactly one engine for the root"
    lock = box.root / "converge.lock"
    with open(lock) as handle:
        assert lock_holders(handle.fileno()) == "", "no stale lock"
    assert not (box.root / "run" / "switch.json").exists(), "no switch intent left behind"
    assert (box.base / "models-a" / MODEL.name).stat().st_size == MODEL.stat().st_size, "model file kept"
    assert (box.base / "kv").is_dir(), "KV dir kept"
    assert (box.root / "releases" / box.baseline_release / "ds4-server").exists(), "older release kept"


def _guard_restore_recorded(box: Box, command: str, release: str) -> None:
    """The guard's restore is the dead run's outcome: status's last_run (text and --json) and the fleet textfile
    say that `command` failed, died during a switch, and what the guard restored; not the earlier run's success."""
    deadline = time.monotonic() + 30  # the guard records once it has restored and stood down
    while not ((status := box.status()).get("last_run") or {}).get("died_during_switch") and time.monotonic() < deadline:
        time.sleep(0.2)
    last = status["last_run"]
    assert last and last["command"] == command and last["ok"] is False and last["died_during_switch"], status
    assert "died during a switch" in last["error"] and last["release"] == release, last
    assert release in last["guard_restored"], last
    text = (box.root / "metrics" / "ds4_converge.prom").read_text()
    assert f'ds4_converge_last_run_success{{root="{box.root}",command="{command}"}} 0' in text, text
    shown = box.cli("status", str(box.spec_path)).stdout
    assert f"{command} at " in shown and "died during a switch" in shown, shown


@pytest.mark.parametrize("point", UPGRADE_POINTS)
def test_a_run_killed_during_an_upgrade_recovers(crash_box, point):
    box = crash_box
    _reset(box, engine={"ref": "v0.3.0"}, model={"main": {"source": str(MODEL), "dest": str(box.base / "models-b")}})
    with open(box.root / "supervisor" / "supervisord.conf", "a") as conf:
        conf.write("; as an older ds4-converge rendered it\n")  # so the run rewrites it (supervisord-conf)
    _crash(box, point)
    assert _serves(box), f"nothing serves after a crash at {point}"
    rc, document = box.converge()
    assert rc == 0 and document["ok"], document
    assert box.status()["release"] == document["release"] != box.baseline_release
    _invariants(box)


@pytest.mark.skipif(programs.haproxy() is None, reason="haproxy is not installed")
@pytest.mark.parametrize("point", BESIDE_POINTS)
def test_a_run_killed_during_an_overlap_switch_recovers(front_crash_box, point):
    """The guard keeps (or brings back) last good behind the front door and stops the candidate; a re-run ends
    converged with one engine and no candidate program left."""
    box = front_crash_box
    _crash_upgrading(box, "v0.3.0", point)
    deadline = time.monotonic() + 30  # the guard stops the candidate once the front door points at last good
    while (box.root / "supervisor" / "programs" / "ds4.next.conf").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not (box.root / "supervisor" / "programs" / "ds4.next.conf").exists(), "the guard removed the candidate"
    rc, document = box.converge()
    assert rc == 0 and document["ok"], document
    assert box.status()["release"] == document["release"] != box.baseline_release
    _invariants(box)


@pytest.mark.skipif(programs.haproxy() is None, reason="haproxy is not installed")
@pytest.mark.parametrize("point", HELD_POINTS)
def test_a_run_killed_after_the_held_roads_flip_recovers(front_crash_box, point):
    """front.overlap off: the run dies once clients were sent to the new engine, before its soak. The guard puts
    last good back and points the front door at it; a re-run ends converged."""
    box = front_crash_box
    box.baseline["front"] = {**box.baseline["front"], "overlap": "off"}
    try:
        _crash_upgrading(box, "v0.3.0", point)
        deadline = time.monotonic() + 30  # the guard sees the run gone, stops the new engine, starts last good
        status = box.status()
        while not (status["release"] == box.baseline_release and status["healthy"]
                   and status["front"]["points_at"] == status["endpoint"].removeprefix("http://")):
            assert time.monotonic() < deadline, status
            time.sleep(0.5)
            status = box.status()
        rc, document = box.converge()
        assert rc == 0 and document["ok"], document
        assert box.status()["release"] == document["release"] != box.baseline_release
        _invariants(box)
    finally:
        box.baseline["front"] = {**box.baseline["front"], "overlap": "auto"}


@pytest.mark.parametrize("point", REVERT_POINTS)
def test_a_run_killed_while_reverting_a_broken_upgrade_recovers(crash_box, point):
    box = crash_box
    _crash_upgrading(box, "v0.3.1-crash-at-start", point)
    rc, document = box.converge()
    assert rc == 1 and document["reverted"], document
    assert box.status()["release"] == box.baseline_release
    _invariants(box)


@pytest.mark.parametrize("point", ROLLBACK_POINTS)
def test_a_rollback_killed_mid_switch_recovers(crash_box, point):
    box = crash_box
    _reset(box, engine={"ref": "v0.3.0"})
    rc, upgraded = box.converge()
    assert rc == 0, upgraded
    _crash(box, point, ("rollback",))
    assert _serves(box), f"nothing serves after a crash at {point}"
    assert box.status()["release"] == upgraded["release"], "the guard put last good (the upgrade) back"
    _guard_restore_recorded(box, "rollback", upgraded["release"])
    proc = box.cli("rollback", str(box.spec_path), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert box.status()["release"] == box.baseline_release
    _invariants(box)


@pytest.mark.parametrize("point", COLD_POINTS)
def test_a_run_killed_during_a_cold_start_recovers(crash_box, point):
    box = crash_box
    _reset(box, server={"ctx": 65536})
    box.stop()  # supervisord and the engine are down: nothing served when the run began
    _crash(box, point)
    rc, document = box.converge()
    assert rc == 0 and document["ok"], document
    assert "-c 65536" in (box.root / "supervisor/programs/ds4.conf").read_text()
    _invariants(box)
