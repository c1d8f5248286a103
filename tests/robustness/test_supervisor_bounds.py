"""Every call to supervisord is bounded: a stopped (SIGSTOP) supervisord or a foreign listener on the root's
socket ends status, converge and stop with a message that names it, never a wait without end."""
import os
import signal
import socket
import threading

import pytest

from ds4_converge.service.supervisor import CALL_TIMEOUT_S

# one command: a call's bound, a connect's, and the tool's own start, with room for a loaded machine
BOUND_S = CALL_TIMEOUT_S * 3 + 20


def test_a_stopped_supervisord_never_hangs_status_converge_or_stop(box):
    rc, first = box.converge()
    assert rc == 0, first
    pid = int((box.root / "run" / "supervisord.pid").read_text())
    os.kill(pid, signal.SIGSTOP)
    try:
        for args in (("status", str(box.spec_path)), (str(box.spec_path),), ("stop", str(box.spec_path))):
            proc = box.cli(*args, timeout=BOUND_S)
            assert proc.returncode not in (0, 4), (args, proc.stdout, proc.stderr)
            assert "did not answer" in proc.stdout + proc.stderr, (args, proc.stdout, proc.stderr)
            assert "Traceback" not in proc.stderr, proc.stderr
    finally:
        os.kill(pid, signal.SIGCONT)
    assert box.status()["healthy"], "nothing was changed while supervisord did not answer"


def test_every_command_meets_a_stopped_supervisord_cleanly_and_never_says_nothing_serves(box):
    """stop, rollback, converge, status, logs against a SIGSTOPped supervisord while its engine serves: exit 1 with
    supervisord's own message, what serves as far as it can be known ("cannot tell", and that the endpoint still
    answers), never "internal error", never "serving: nothing", no traceback written."""
    rc, first = box.converge()
    assert rc == 0, first
    assert box.converge("--set", "server.ctx=16384")[0] == 0  # a last good to roll back to
    pid = int((box.root / "run" / "supervisord.pid").read_text())
    os.kill(pid, signal.SIGSTOP)
    try:
        for args in (("stop",), ("rollback",), ("converge",), ("status",)):
            proc = box.cli(*args, str(box.spec_path), timeout=BOUND_S)
            said = proc.stdout + proc.stderr
            assert proc.returncode == 1, (args, said)
            assert "did not answer" in said and "internal error" not in said, (args, said)
            assert "serving: nothing" not in said and "not serving" not in said, (args, said)
            assert "cannot tell" in said and f"{box.endpoint} answers /v1/models" in said, (args, said)
            code, document = box.json(*args, str(box.spec_path))
            assert code == 1 and document["aborted"] in (None, "failed"), (args, document)
            assert document["release"] is None and "did not answer" in document["serving_unknown"], document
        assert not (box.root / "logs" / "errors.log").exists(), (box.root / "logs" / "errors.log").read_text()
    finally:
        os.kill(pid, signal.SIGCONT)
    assert box.status()["healthy"], "nothing was changed while supervisord did not answer"


@pytest.mark.parametrize("reply", [b"", b"HTTP/1.0 200 OK\r\n\r\nnot xml"], ids=["silent", "garbage"])
def test_a_foreign_listener_on_the_socket_never_hangs_a_converge(box, reply):
    run = box.root / "run"
    run.mkdir(parents=True)
    os.chmod(run, 0o700)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(run / "supervisor.sock"))
    listener.listen(8)
    accepted = []

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(conn)
            if reply:
                conn.recv(65536)
                conn.sendall(reply)
                conn.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        commands = [(str(box.spec_path),)] + ([("status", str(box.spec_path))] if not reply else [])
        for args in commands:
            proc = box.cli(*args, timeout=BOUND_S)
            assert proc.returncode != 0, (args, proc.stdout, proc.stderr)
            assert "supervisor.sock" in proc.stdout + proc.stderr, (args, proc.stdout, proc.stderr)
            assert "Traceback" not in proc.stderr, proc.stderr
    finally:
        listener.close()
        for conn in accepted:
            conn.close()
