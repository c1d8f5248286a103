"""A re-run right after a run was SIGKILLed mid-switch finds the switch guard putting last good back under the run
lock: it waits for the guard (bounded, saying why), then converges, instead of exiting 3 as if another run held
the lock."""
import os
import signal
import subprocess
import sys
import time

from ds4_converge.core.lock import lock_holders


def _guard_holding_the_lock(box, within: float = 15) -> int | None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        fd = os.open(box.root / "converge.lock", os.O_RDONLY)
        try:
            holders = lock_holders(fd).split(", ")
        finally:
            os.close(fd)
        for pid in filter(str.isdigit, holders):
            try:
                if b"ds4_converge.service.guard" in open(f"/proc/{pid}/cmdline", "rb").read():
                    return int(pid)
            except OSError:
                pass
        time.sleep(0.02)
    return None


def test_a_rerun_right_after_sigkill_waits_for_the_guard_then_converges(box):
    rc, first = box.converge()
    assert rc == 0, first
    with box.edited({"engine.ref": "v0.3.1-hang"}):  # ignores SIGTERM: the guard's restore takes its grace
        killed = box.cli(str(box.spec_path), env={"DS4C_CRASH_AT": "new-started"}, timeout=120)
    assert killed.returncode == -9, (killed.stdout, killed.stderr)
    guard = _guard_holding_the_lock(box)
    assert guard, "the guard took the lock to put last good back"
    os.kill(guard, signal.SIGSTOP)  # keep it restoring while the re-run starts: the race, made certain
    try:
        rerun = subprocess.Popen([sys.executable, "-m", "ds4_converge.cli", str(box.spec_path)], text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env={**os.environ, "NO_COLOR": "1", "XDG_CACHE_HOME": str(box.user_cache)})
        time.sleep(4)
    finally:
        os.kill(guard, signal.SIGCONT)
    stdout, stderr = rerun.communicate(timeout=180)
    proc = subprocess.CompletedProcess(rerun.args, rerun.returncode, stdout, stderr)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "waiting (up to" in proc.stderr and "switch guard" in proc.stderr, (proc.stdout, proc.stderr)
    status = box.status()
    assert status["healthy"] and status["release"] == first["release"], status
    assert not (box.root / "run" / "switch.json").exists()
