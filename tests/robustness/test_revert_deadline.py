"""A revert fits a deadline of its own and ends with last good answering, whatever the new engine does: an engine
that never became healthy is not drained and not given server.stop_wait_s (a short grace, then SIGKILL of its
process group), and the run says what it waits for."""
import time

from ds4_converge.service.switch import UNPROVEN_STOP_GRACE_S


def _last_good_serves(box, first: dict) -> None:
    status = box.status()
    assert status["healthy"] and status["release"] == first["release"], status


def _converged_then_exiting_late(box) -> dict:
    """Converged (its report), then a spec whose engine loads for 1.5 s (past supervisord's one-second start
    window) and exits 1 on a value it refuses late (`--trace` into a folder that does not exist)."""
    rc, first = box.converge()
    assert rc == 0, first
    box.spec["server"]["env"]["DS4_SIM_LOAD_SECONDS"] = "1.5"
    box.spec["server"]["extra_args"] = ["--trace", "/nonexistent-ds4c/trace.txt"]
    box.spec["health"]["deadline_s"] = 120
    box.write()
    return first


def test_a_hung_engine_is_reverted_within_its_own_deadline_and_last_good_answers(box):
    box.spec["server"]["stop_wait_s"] = 600  # the default: what a hung engine used to cost the revert
    box.write()
    rc, first = box.converge()
    assert rc == 0, first
    deadline_s = 8
    box.spec["engine"]["ref"] = "v0.3.1-hang"  # its load never ends and it ignores SIGTERM
    box.spec["health"]["deadline_s"] = deadline_s
    box.write()
    started = time.monotonic()
    proc = box.cli(str(box.spec_path), timeout=180)
    took = time.monotonic() - started
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and f"reverted to {first['release']}" in out, out
    # the probe's deadline, the stop's grace, last good's start, the builds: never server.stop_wait_s
    assert took < deadline_s + UNPROVEN_STOP_GRACE_S + 60, (took, out)
    assert "never passed the probe" in out and f"SIGKILL after {UNPROVEN_STOP_GRACE_S}s" in out, out
    _last_good_serves(box, first)


def test_an_engine_that_exits_after_its_start_window_is_a_crash_loop_reverted_at_once(box):
    """The engine loads for 1.5 s (past supervisord's one-second start window), then refuses a value late
    (`--trace` into a folder that does not exist) and exits 1; supervisord starts it again and again, never
    BACKOFF. The probe sees the first exit and fails with its status and last words, not 'not listening yet
    (loading)' until the deadline. (With the watchdog on, supervisord restarts nothing itself: the first exit
    is final, and the test below covers it; the crash loop needs supervisord's own autorestart.)"""
    box.spec["health"]["watchdog"] = {"enabled": False}
    first = _converged_then_exiting_late(box)
    rc, document = box.converge()
    assert rc == 1 and document["reverted"], document
    assert "a crash loop, not a slow load" in document["error"], document["error"]
    assert "exit status 1" in document["error"] and "failed to open trace file" in document["error"], document
    assert "not ready within" not in document["error"], document["error"]
    assert "failed to open trace file /nonexistent-ds4c/trace.txt" in document["detail"], document["detail"]
    _last_good_serves(box, first)


def test_with_the_watchdog_an_engine_that_exits_after_its_start_window_is_reverted_at_once(box):
    """The same late exit with the watchdog on (the default): supervisord does not start it again, and the probe
    fails at the exit with its status and last words."""
    first = _converged_then_exiting_late(box)
    started = time.monotonic()
    rc, document = box.converge()
    assert rc == 1 and document["reverted"], document
    assert time.monotonic() - started < 60, document  # the exit, not the 120 s deadline
    assert "ds4-server exited (exit status 1" in document["error"], document["error"]
    assert "failed to open trace file /nonexistent-ds4c/trace.txt" in document["error"], document["error"]
    _last_good_serves(box, first)
