"""A revert fits a deadline of its own and ends with last good answering, whatever the new engine does: an engine
that never became healthy is not drained and not given server.stop_wait_s (a short grace, then SIGKILL of its
process group), and the run says what it waits for."""
import time

from ds4_converge.service.switch import UNPROVEN_STOP_GRACE_S


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
    status = box.status()
    assert status["healthy"] and status["release"] == first["release"], status
