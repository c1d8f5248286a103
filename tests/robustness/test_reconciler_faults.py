"""Failures nobody planned for: any exception after the old engine stopped reverts, a failing revert says what
serves, a supervisord that answers wrongly is never taken for "not running", a cold start starts the engine once,
a converge while the watchdog restarts a crashed engine waits for it, and --check with a model still to download
plans instead of crashing, and a rollback from last good while supervisord still starts it goes to the release
before."""
import json
import os
import signal
import socket
import threading
import time

import pytest

from boxes import MODEL, engine_pids
from ds4_converge.cli import main as cli
from ds4_converge.core.layout import Layout
from ds4_converge.health import role as probe_role
from ds4_converge.orchestrate import drive
from ds4_converge.service.supervisor import Supervisor, SupervisorError


def converge_in_process(box, capsys, *extra):
    rc = cli.main([str(box.spec_path), "--json", *extra])
    out = capsys.readouterr().out
    return rc, json.loads(out)


def test_an_unexpected_exception_during_the_probe_reverts(box, capsys, monkeypatch):
    rc, first = converge_in_process(box, capsys)
    assert rc == 0, first
    old_pid = box.status()["pid"]

    def bug(*args, **kwargs):
        raise ZeroDivisionError("a bug in the probe")

    monkeypatch.setattr(probe_role, "wait_healthy", bug)
    rc, document = converge_in_process(box, capsys, "--set", "server.ctx=65536")
    assert rc == 1 and document["reverted"], document
    assert "probe: unexpected ZeroDivisionError: a bug in the probe" in document["error"]
    assert f"reverted to {first['release']}" in document["error"]
    status = box.status()
    assert status["healthy"] and status["pid"] != old_pid
    assert "-c 32768" in (box.root / "supervisor/programs/ds4.conf").read_text()


def test_a_revert_that_fails_says_so_and_what_serves(box, capsys, monkeypatch):
    rc, first = converge_in_process(box, capsys)
    assert rc == 0, first
    real_run = drive.run
    calls = []

    def switch_then_fail(ctx, sw, steps):  # the road's steps: the switch's, then the revert's
        calls.append(sw.target.release)
        if len(calls) > 1:
            raise RuntimeError("a bug in the revert")  # not one of the errors a revert expects
        return real_run(ctx, sw, steps)

    monkeypatch.setattr(drive, "run", switch_then_fail)
    monkeypatch.setattr(probe_role, "wait_healthy", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("nope")))
    rc, document = converge_in_process(box, capsys, "--set", "server.ctx=65536")
    assert rc == 1 and not document["reverted"], document
    pid = box.status()["pid"]
    assert "the revert failed too (RuntimeError: a bug in the revert)" in document["error"]
    assert f"serving now: ds4 (pid {pid}" in document["error"]
    assert f") on release {first['release']}" in document["error"], "the new config, on the same release"


class GarbageSupervisor:
    """Something on supervisord's socket that accepts connections but does not speak XML-RPC."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(path))
        self.sock.listen(8)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.sendall(b"HTTP/1.0 500 Busy\r\nContent-Length: 4\r\n\r\nbusy")
            conn.close()

    def close(self):
        self.sock.close()


def test_a_supervisord_that_answers_wrongly_is_an_error_not_not_running(tmp_path):
    layout = Layout(tmp_path / "r")
    layout.ensure()
    supervisor = Supervisor(layout)
    assert supervisor.is_running() is False, "no socket: not running"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(layout.socket))
    stale.close()  # a socket file nobody listens on: a supervisord that is gone
    assert supervisor.is_running() is False
    layout.socket.unlink()
    garbage = GarbageSupervisor(layout.socket)
    try:
        with pytest.raises(SupervisorError):
            supervisor.is_running()
        with pytest.raises(SupervisorError):
            supervisor.all_processes()
    finally:
        garbage.close()


def test_a_converge_never_starts_a_second_supervisord_over_one_that_answers_wrongly(box):
    layout = Layout(box.root)
    layout.ensure()
    garbage = GarbageSupervisor(layout.socket)
    try:
        proc = box.cli(str(box.spec_path), "--json")
        document = json.loads(proc.stdout)
        assert proc.returncode == 1 and "does not answer" in document["error"], document
        assert layout.socket.is_socket(), "the socket of a live supervisord is never unlinked"
        assert not engine_pids(box.root)
    finally:
        garbage.close()


def _spawns(box) -> int:
    log = box.root / "logs" / "supervisord.log"
    return log.read_text().count("spawned: 'ds4'") if log.exists() else 0


@pytest.mark.parametrize("change", [{}, {"server.ctx": 65536}])
def test_a_cold_start_starts_the_engine_once(box, change):
    rc, first = box.converge()
    assert rc == 0, first
    box.stop()  # supervisord and the engine are down; the old program file stays
    before = _spawns(box)
    with box.edited(change):
        rc, document = box.converge()
        assert rc == 0, document
        assert _spawns(box) == before + 1, "one start of the engine, never the old one first"
        status = box.status()
        assert status["healthy"] and engine_pids(box.root) == {status["pid"]}
        box.stop()


def test_a_converge_while_supervisord_restarts_a_crashed_engine_waits_for_it(box):
    box.spec["server"]["env"]["DS4_SIM_LOAD_SECONDS"] = "10"  # the next converge starts well within the load
    box.spec["health"]["deadline_s"] = 40
    box.spec["health"]["watchdog"] = {"interval_s": 0.5}
    box.write()
    rc, first = box.converge()
    assert rc == 0, first
    os.kill(box.status()["pid"], signal.SIGKILL)  # the watchdog restarts it (an exit nobody ordered)
    deadline = time.monotonic() + 10
    while box.status()["state"] not in ("STARTING", "RUNNING") and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the watchdog lets go of the run lock once supervisord has the start
    rc, document = box.converge()
    assert rc == 0, document
    probe = next(r for r in document["roles"] if r["name"] == "probe")
    assert probe["msg"].startswith("healthy again"), probe
    assert box.status()["healthy"] and _spawns(box) == 2, "waited for the watchdog's restart, started nothing"


def test_check_mode_plans_a_model_that_is_not_downloaded_yet(box, tmp_path):
    rc, first = box.converge()
    assert rc == 0, first
    box.spec["model"]["main"] = {"source": str(MODEL), "dest": str(tmp_path / "models")}
    box.write()
    proc = box.cli(str(box.spec_path), "--check", "--diff")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "not downloaded yet" in proc.stdout and not (tmp_path / "models").exists()


def test_a_rollback_from_last_good_while_supervisord_still_starts_it_goes_to_the_release_before(box, capsys):
    """An engine just (re)started — by the switch guard after a run died, say — is STARTING for supervisord's
    startsecs while it may already answer: a rollback then is a rollback from last good, not to it."""
    rc, first = box.converge()
    assert rc == 0, first
    box.spec["engine"]["ref"] = "v0.3.0"
    box.write()
    rc, upgraded = box.converge()
    assert rc == 0 and upgraded["release"] != first["release"], upgraded
    supervisor = Supervisor(Layout(box.root))
    supervisor.stop("ds4", grace=10)
    supervisor._rpc().startProcess("ds4", False)  # supervisord says STARTING for its startsecs (1 s)
    assert supervisor.info("ds4")["statename"] == "STARTING"
    rc = cli.main(["rollback", str(box.spec_path), "--json"])
    document = json.loads(capsys.readouterr().out)
    assert rc == 0 and document["release"] == first["release"], document
    assert box.status()["release"] == first["release"]
