"""While a new engine loads, the probe asks supervisord about it about once a second, and looks at the engine's
own pid in between (health/probe.py): an engine that dies is still noticed at once."""
import subprocess
import sys
import threading
import time

import pytest

from boxes import free_port

from ds4_converge.health import probe
from ds4_converge.health.probe import ProbeTarget, Unhealthy, wait_healthy


class Watch:
    """supervisord's view of one engine: STARTING with `pid` until the engine exits, then EXITED."""

    def __init__(self, engine: subprocess.Popen):
        self.engine, self.asked = engine, 0

    def state(self):
        self.asked += 1
        return ("STARTING", self.engine.pid, "") if self.engine.poll() is None else ("EXITED", None, "")

    def exits(self):
        return ["exit status 1"] if self.engine.poll() is not None else []

    def last_lines(self):
        return ""

    def last_words(self):
        return "ds4: aborting startup"


@pytest.fixture
def loading_engine():
    """A process that stays up and never listens: an engine still loading its weights."""
    engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield engine
    engine.kill()
    engine.wait()


def target(deadline_s: float) -> ProbeTarget:
    return ProbeTarget(endpoint=f"http://127.0.0.1:{free_port()}", deadline_s=deadline_s, soak_s=0, interval_s=2,
                       smoke=None)


def test_a_loading_engine_costs_supervisord_a_call_a_second_not_twenty(loading_engine, monkeypatch):
    monkeypatch.setattr(probe, "SUPERVISOR_POLL_S", 0.25)  # a quarter of the time, the same proportion
    watch = Watch(loading_engine)
    with pytest.raises(Unhealthy, match="not ready within 1s"):
        wait_healthy(target(1.0), watch)
    # the port was tried every LISTEN_POLL_S (some 20 times); supervisord was asked once per SUPERVISOR_POLL_S
    assert 2 <= watch.asked <= 1.0 / probe.SUPERVISOR_POLL_S + 2, watch.asked


def test_an_engine_that_dies_while_loading_is_noticed_at_once(loading_engine):
    watch = Watch(loading_engine)
    threading.Timer(0.3, loading_engine.kill).start()
    started = time.monotonic()
    with pytest.raises(Unhealthy, match=r"ds4-server exited \(exit status 1; supervisord: EXITED\)"):
        wait_healthy(target(30), watch)
    assert time.monotonic() - started < 0.3 + probe.SUPERVISOR_POLL_S / 2


def test_an_engine_gone_before_supervisord_logged_its_exit_is_reported_as_a_crash():
    """The port closes before supervisord writes `exited: …` to its log (its tick): the soak waits for the record
    rather than call a killed engine one that "stopped answering"."""
    import subprocess

    from ds4_converge.health.probe import _exits_of

    gone = subprocess.Popen(["true"])
    gone.wait()
    asked = []

    class Watch:
        def exits(self):
            asked.append(1)
            return ["terminated by SIGKILL"] if len(asked) > 3 else []

    assert _exits_of(Watch(), gone.pid) == ["terminated by SIGKILL"]
    asked.clear()
    import os

    assert _exits_of(Watch(), os.getpid()) == [] and len(asked) == 1  # alive: no waiting
