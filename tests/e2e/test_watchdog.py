"""The watchdog between runs, with real supervisord and the simulated engine: an engine sent SIGTERM from outside
(it drains and exits 0), one that exits 0 on SIGINT, and one SIGSTOPped (hung: it keeps its PID and answers
nothing) are each restarted within the watchdog's bounds, and each incident is recorded with its cause."""
import json
import os
import signal
import time
import urllib.request

import pytest

from boxes import engine_pids

pytestmark = pytest.mark.slow

WATCHDOG = {"interval_s": 0.5, "failures": 2, "backoff_max_s": 4, "completion_every_s": 2}


def _wait(predicate, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = predicate()
        if got:
            return got
        time.sleep(0.2)
    pytest.fail(f"not within {timeout}s: {what}")


def _answers(box) -> bool:
    try:
        with urllib.request.urlopen(f"{box.endpoint}/v1/models", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def _incidents(box) -> list[dict]:
    path = box.root / "logs" / "incidents.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _restarted_after(box, pid: int, count: int, timeout: float) -> dict:
    """The new engine answers, under another PID, and the incident that did it is recorded."""
    new = _wait(lambda: (lambda pids: pids and pid not in pids and _answers(box) and pids)(engine_pids(box.root)),
                timeout, f"a new engine answering after pid {pid}")
    incidents = _wait(lambda: len(_incidents(box)) >= count and _incidents(box), 5, "the incident recorded")
    incident = incidents[count - 1]
    assert incident["action"] == "restarted" and incident["pid"] == pid, incident
    assert incident["new_pid"] in new, (incident, new)
    time.sleep(1.5)  # past supervisord's startsecs: an exit before it is supervisord's own retry (BACKOFF)
    return incident


def test_the_watchdog_restarts_what_nobody_restarted_and_says_why(box):
    box.spec["health"].update(deadline_s=3, watchdog=WATCHDOG)
    box.write()
    rc, document = box.converge()
    assert rc == 0, document
    conf = (box.root / "supervisor" / "programs" / "ds4.conf").read_text()
    assert "autorestart=false" in conf  # the watchdog restarts, and counts, every exit

    (pid,) = engine_pids(box.root)
    os.kill(pid, signal.SIGTERM)  # from outside: ds4 drains and exits 0
    first = _restarted_after(box, pid, 1, timeout=15)
    assert first["cause"] == "the engine exited (exit status 0), and no stop was ordered", first

    (pid,) = engine_pids(box.root)
    os.kill(pid, signal.SIGINT)  # another exit 0 nobody ordered
    second = _restarted_after(box, pid, 2, timeout=15)
    assert "exit status 0" in second["cause"], second

    time.sleep(3.5)  # past the restarted engine's load grace (health.deadline_s)
    (pid,) = engine_pids(box.root)
    os.kill(pid, signal.SIGSTOP)  # hung: its PID stays, it answers nothing
    try:
        third = _restarted_after(box, pid, 3, timeout=30)
    finally:
        if pid in engine_pids(box.root):
            os.kill(pid, signal.SIGCONT)
    assert third["cause"].startswith("2 checks failed in a row, the last: /v1/models did not answer within 1s; "), third
    assert "and no progress (CPU time, log, bytes sent)" in third["cause"], third
    assert third["check"] == "/v1/models" and third["timeout_s"] == 1, third

    status = box.status()
    assert status["watchdog"]["incidents"] == 3, status
    assert status["watchdog"]["last_restart"]["cause"] == third["cause"], status
    metrics = (box.root / "metrics" / "ds4_converge.prom").read_text()
    assert "ds4_converge_watchdog_incidents" in metrics and "ds4_converge_watchdog_last_restart_timestamp_seconds" \
        in metrics, metrics


def test_an_ordered_stop_is_not_undone_and_a_converge_holding_the_lock_is_not_disturbed(box):
    box.spec["health"].update(watchdog=WATCHDOG)
    box.write()
    rc, document = box.converge()
    assert rc == 0, document
    from ds4_converge.core.layout import Layout
    from ds4_converge.core.lock import RunLock

    with RunLock(Layout(box.root).lock_file).acquire():  # as a converge does for its whole run
        (pid,) = engine_pids(box.root)
        os.kill(pid, signal.SIGTERM)
        _wait(lambda: not engine_pids(box.root), 10, "the engine gone")
        time.sleep(3)
        assert not engine_pids(box.root) and _incidents(box) == []
    _restarted_after(box, pid, 1, timeout=15)  # the lock released: now it is restarted
    box.stop()  # ordered: the watch is removed with the engine
    assert not (box.root / "run" / "watch.json").exists()


def test_new_watchdog_settings_reach_it_without_a_restart(box):
    box.spec["health"].update(watchdog=WATCHDOG)
    box.write()
    rc, document = box.converge()
    assert rc == 0, document
    watch = box.root / "run" / "watch.json"
    assert json.loads(watch.read_text())["failures"] == 2
    (pid,) = engine_pids(box.root)
    with box.edited({"health.watchdog": {**WATCHDOG, "failures": 5}}):
        rc, document = box.converge()
        assert rc == 0 and document["changed"], document
        assert json.loads(watch.read_text())["failures"] == 5
        assert engine_pids(box.root) == {pid}  # the engine was not restarted for it
        rc, again = box.converge()
        assert rc == 0 and not again["changed"], again
