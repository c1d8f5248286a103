"""The real b030961 distributed worker (CPU build), as the tool reads and stops it.

Facts from ds4_distributed.c, checked here: the worker starts at once on a slice model and binds its data port;
it retries a missing coordinator about every 6.1 s; it reconnects when the coordinator goes; the first SIGTERM
only sets a flag its loop never reads and the second exits 130; a second worker on the same lock file is refused.
The coordinator is a plain TCP listener of the test: the real one cannot run on a CPU build
(test_real_coordinator.py).
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time

import pytest

import real_engine
from boxes import free_port

from ds4_converge.health.worker import data_port_open, read_state, wait_worker
from ds4_converge.spec.model import Address

pytestmark = pytest.mark.slow


class Worker:
    """A real worker run by the test, its stderr in a file (what supervisord's log would hold)."""

    def __init__(self, engine, model, tmp_path, *, lock=None, coordinator_port=None, listen_port=None):
        self.listen = Address(host="127.0.0.1", port=listen_port or free_port())
        self.coordinator = Address(host="127.0.0.1", port=coordinator_port or free_port())
        self.log = tmp_path / f"worker-{self.listen.port}.log"
        self.lock = lock or tmp_path / "worker.lock"
        argv = [str(engine.server), "-m", str(model), "--role", "worker", "--layers", "42:output",
                "--listen", self.listen.host, str(self.listen.port),
                "--coordinator", self.coordinator.host, str(self.coordinator.port)]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                         env={**os.environ, "DS4_LOCK_FILE": str(self.lock)})

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def state(self):
        return read_state(self.text())

    # EngineWatch, as health.wait_worker asks supervisord
    def watch_state(self):
        return ("RUNNING" if self.proc.poll() is None else "EXITED"), self.proc.pid, ""


class ProcWatch:
    def __init__(self, worker: Worker):
        self.worker = worker

    def state(self):
        return self.worker.watch_state()

    def exits(self):
        return [] if self.worker.proc.poll() is None else [f"exit status {self.worker.proc.returncode}"]

    def last_words(self):
        lines = self.worker.text().strip().splitlines()
        return lines[-1] if lines else ""

    def last_lines(self):
        return self.worker.text()[-2000:]

    def log_text(self):
        return self.worker.text()


@pytest.fixture
def worker(engine_b030961, worker_model, tmp_path):
    started = []

    def start(**kwargs) -> Worker:
        w = Worker(engine_b030961, worker_model, tmp_path, **kwargs)
        started.append(w)
        return w

    yield start
    for w in started:
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait(10)


def test_starts_listens_and_retries_its_coordinator_about_every_six_seconds(worker):
    w = worker()
    pid, state = wait_worker(ProcWatch(w), w.text, w.listen, deadline_s=10, soak_s=0)
    assert pid == w.proc.pid and state.started and not state.connected
    assert data_port_open(w.listen)
    assert real_engine.wait_for(lambda: w.text().count("; retrying") >= 2, timeout=15, interval=0.1), w.text()
    assert re.search(rf"unable to connect to 127\.0\.0\.1:{w.coordinator.port}: Connection refused; retrying",
                     w.text())
    # the interval: 200 connects 25 ms apart, then a 1 s sleep; two lines take 6-13 s on a loaded box
    assert read_state(w.text()).describe().startswith("not connected to its coordinator")


def test_connects_and_reconnects_when_the_coordinator_goes(worker):
    with socket.create_server(("127.0.0.1", 0)) as coordinator:
        w = worker(coordinator_port=coordinator.getsockname()[1])
        coordinator.settimeout(15)
        peer, _ = coordinator.accept()
        assert real_engine.wait_for(lambda: w.state().connected, timeout=10), w.text()
        peer.close()  # the coordinator goes away: the worker keeps running and reaches for it again
        assert real_engine.wait_for(lambda: "reconnecting" in w.text(), timeout=10), w.text()
        assert not w.state().connected and w.proc.poll() is None
        again, _ = coordinator.accept()
        assert real_engine.wait_for(lambda: w.state().connected, timeout=10), w.text()
        again.close()


def test_its_data_port_accepts_while_it_is_connected_and_health_agrees(worker):
    """ds4_distributed.c: the data listener thread accepts for as long as the worker runs; a connection that
    sends nothing is read to EOF and closed. So a connected worker's data port accepts, and the one judgement
    that the probe, status and the fleet facts use calls it healthy."""
    from ds4_converge.health.worker import judge, observe

    with socket.create_server(("127.0.0.1", 0)) as coordinator:
        w = worker(coordinator_port=coordinator.getsockname()[1])
        coordinator.settimeout(15)
        peer, _ = coordinator.accept()
        assert real_engine.wait_for(lambda: w.state().connected, timeout=10), w.text()
        for _ in range(20):
            assert data_port_open(w.listen), w.text()
        assert observe(w.text(), w.listen).connected and judge(observe(w.text(), w.listen)) is None
        assert w.proc.poll() is None and "data accept failed" not in w.text()
        peer.close()


def test_the_first_sigterm_is_ignored_the_second_exits_130(worker):
    w = worker()
    wait_worker(ProcWatch(w), w.text, w.listen, deadline_s=10, soak_s=0)
    w.proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert w.proc.poll() is None, "the first SIGTERM ended the worker"
    w.proc.send_signal(signal.SIGTERM)
    assert w.proc.wait(5) == 130


def test_its_lock_refuses_a_second_worker_and_is_free_once_it_is_gone(worker, tmp_path):
    first = worker()
    wait_worker(ProcWatch(first), first.text, first.listen, deadline_s=10, soak_s=0)
    second = worker(lock=first.lock)
    assert second.proc.wait(10) == 2
    assert f"another ds4 process is already running (pid {first.proc.pid})" in second.text()
    first.proc.kill()
    first.proc.wait(5)
    assert str(first.proc.pid) in first.lock.read_text()  # the dead PID stays in the file; the lock is free
    third = worker(lock=first.lock)
    wait_worker(ProcWatch(third), third.text, third.listen, deadline_s=10, soak_s=0)


def test_a_worker_that_cannot_bind_its_data_port_is_reported_as_it_exits(worker):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        w = worker(listen_port=taken.getsockname()[1])
        with pytest.raises(Exception, match="exit status 1"):
            wait_worker(ProcWatch(w), w.text, w.listen, deadline_s=10, soak_s=0)
        assert "distributed worker:" in w.text()


def test_supervisord_stops_a_worker_with_a_second_sigterm_not_its_grace(engine_b030961, worker_model, tmp_path):
    """The program file the tool renders for a worker, run by real supervisord, stopped by the tool's
    Supervisor.stop: in well under the grace (a single SIGTERM would wait for the SIGKILL)."""
    from ds4_converge.core.layout import Layout, write_atomic
    from ds4_converge.service import render
    from ds4_converge.service.supervisor import Supervisor

    layout = Layout(tmp_path / "root")
    layout.ensure()
    listen, coordinator = free_port(), free_port()
    argv = ["/usr/bin/env", f"DS4_LOCK_FILE={tmp_path / 'w.lock'}", str(engine_b030961.server), "-m",
            str(worker_model), "--role", "worker", "--layers", "42:output", "--listen", "127.0.0.1", str(listen),
            "--coordinator", "127.0.0.1", str(coordinator)]
    write_atomic(layout.supervisord_conf, render.supervisord_conf(layout))
    write_atomic(layout.program_conf("w"), render.program_conf(
        name="w", release="r", argv=argv, directory=str(tmp_path), log=str(layout.engine_log("w")), user=None,
        stop_wait_s=30, ignores_first_term=True))
    supervisor = Supervisor(layout)
    supervisor.start_daemon()
    try:
        supervisor.await_autostart("w")
        assert real_engine.wait_for(lambda: data_port_open(Address(host="127.0.0.1", port=listen)), timeout=15)
        assert real_engine.wait_for(lambda: supervisor.running_pid("w") is not None, timeout=10)
        began = time.monotonic()
        supervisor.stop("w", grace=30)
        took = time.monotonic() - began
        assert took < 10, f"the stop took {took:.1f}s: it waited for the grace"
        assert supervisor.info("w")["statename"] == "STOPPED"
        assert "exited: w (exit status 130" in layout.supervisord_log.read_text() or \
            "stopped: w (exit status 130)" in layout.supervisord_log.read_text(), layout.supervisord_log.read_text()
    finally:
        supervisor.shutdown()
