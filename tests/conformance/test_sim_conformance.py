"""The simulated engine against the real one, where both can run here: command line, start-up order, lock.

The simulator stands in for the real engine in the end-to-end tests (it can serve; the real one cannot without
an 80 GB model). Wherever both reach the same point, they must say the same thing and exit alike.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess

import pytest

from real_engine import REPO, stop, wait_for

from ds4_converge.engine.release import parse_help_flags

MAIN = REPO / "engine" / "models" / "tiny-ds4flash.gguf"
STAMP = re.compile(r"^\d{4} \d\d:\d\d:\d\d ")

pytestmark = pytest.mark.slow


def run(binary, *args, lock, cwd=None, env=None) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DS4_")}
    environment.update({"DS4_LOCK_FILE": str(lock), "DS4_SIM_LOAD_SECONDS": "0.1", **(env or {})})
    return subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True, timeout=60, cwd=cwd,
                          env=environment)


def first_line(proc: subprocess.CompletedProcess) -> str:
    """The first line on stderr without the server's timestamp (the sim adds its build line first)."""
    lines = [STAMP.sub("", line) for line in proc.stderr.splitlines() if not line.startswith("ds4: build target=")]
    return lines[0] if lines else ""


def test_help_has_the_same_layout_and_flags(engine, sim_upstream, lock):
    real, sim = run(engine.server, "--help", lock=lock), run(sim_upstream, "--help", lock=lock)
    assert (real.returncode, sim.returncode) == (0, 0) and real.stderr == sim.stderr == ""
    assert parse_help_flags(sim.stdout) == parse_help_flags(real.stdout)
    headings = [line for line in real.stdout.splitlines() if re.match(r"^[A-Z][^:]*:$", line)]
    assert [h for h in headings if h in sim.stdout.splitlines()] == [h for h in headings if h != "Notes:"
                                                                     and "Thinking" not in h]
    assert sim.stdout.splitlines()[:4] == real.stdout.splitlines()[:4]


@pytest.mark.parametrize("args", [
    ["--bogus"], ["--port", "0"], ["--port"], ["--ctx", "abc"], ["-c", "-5"], ["--backend", "vulkan"],
    ["--mtp-margin", "2000"], ["--kv-cache-cold-max-tokens", "10"], ["--kv-cache-boundary-align-tokens", "-1"],
    ["--power", "100"], ["--dir-steering-ffn", "2"], ["--chdir", "/nonexistent-dir"], ["-m", "/nonexistent.gguf"],
])
def test_command_line_errors_read_and_exit_alike(engine, sim_upstream, lock, args):
    real = run(engine.server, *args, lock=lock)
    sim = run(sim_upstream, *args, lock=lock)
    assert sim.returncode == real.returncode, (real.stderr, sim.stderr)
    assert first_line(sim) == first_line(real)
    if real.returncode == 2:
        assert ("Usage: ds4-server [options]" in sim.stderr) == ("Usage: ds4-server [options]" in real.stderr)


def test_what_the_real_parser_takes_the_sim_serves(engine, sim_upstream, lock, tmp_path):
    """Edge values the real parser accepts (a port past 65535 is cut to 16 bits by htons, a 0 alignment)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = ["-m", MAIN, "--port", port + 65536, "--cors", "--kv-cache-boundary-align-tokens", "0",
            "--mtp-margin", "0", "--tool-memory-max-ids", "1"]
    real = run(engine.server, *args, lock=lock)
    assert real.returncode == 1 and "ds4: required tensor is missing" in real.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("DS4_")}
    sim = subprocess.Popen([str(sim_upstream), *map(str, args)], stderr=subprocess.PIPE, text=True,
                           env={**env, "DS4_LOCK_FILE": str(tmp_path / "sim.lock"), "DS4_SIM_LOAD_SECONDS": "0.1"})
    try:
        assert wait_for(lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0, timeout=20)
    finally:
        assert stop(sim) == 0
    assert f"listening on http://127.0.0.1:{port + 65536}" in sim.stderr.read()


# ------------------------------------------------------------------------------------------- the lock

def hold_real(engine, lock, fifo) -> subprocess.Popen:
    """A real ds4-server that holds the lock: it opens its model, a FIFO with no writer, and blocks there."""
    os.mkfifo(fifo)
    proc = subprocess.Popen([str(engine.server), "-m", str(fifo)], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "DS4_LOCK_FILE": str(lock)})
    assert wait_for(lambda: lock.exists() and lock.read_text().strip() == str(proc.pid)), "no lock taken"
    return proc


def hold_sim(sim_upstream, lock, port) -> subprocess.Popen:
    """A simulated ds4-server that holds the lock during a long load."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DS4_")}
    proc = subprocess.Popen([str(sim_upstream), "-m", str(MAIN), "--port", str(port)], stderr=subprocess.PIPE,
                            text=True, env={**env, "DS4_LOCK_FILE": str(lock), "DS4_SIM_LOAD_SECONDS": "60"})
    assert wait_for(lambda: lock.exists() and lock.read_text().strip() == str(proc.pid)), "no lock taken"
    return proc


@pytest.mark.parametrize("holder", ["real", "sim"])
def test_a_second_server_on_the_same_lock_file_refuses_to_start(engine, sim_upstream, tmp_path, holder):
    """Two ds4-server processes with one DS4_LOCK_FILE: the second exits 2 naming the first, whichever of the
    two programs each is; the file keeps the holder's pid, and is created 0600."""
    lock = tmp_path / "ds4.lock"
    first = hold_real(engine, lock, tmp_path / "fifo") if holder == "real" else hold_sim(sim_upstream, lock, 18999)
    try:
        expected = f"ds4: another ds4 process is already running (pid {first.pid}); refusing to start"
        for second in (engine.server, sim_upstream):
            proc = run(second, "-m", MAIN, lock=lock)
            assert proc.returncode == 2 and first_line(proc) == expected, proc.stderr
        assert lock.read_text() == f"{first.pid}\n" and (lock.stat().st_mode & 0o777) == 0o600
    finally:
        stop(first, signal.SIGKILL)
    # the pid stays behind: the file is no pid file, only the flock says who runs
    assert lock.read_text() == f"{first.pid}\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DS4_")}
    for second in (engine.server, sim_upstream):
        proc = subprocess.Popen([str(second), "-m", str(tmp_path / "missing.gguf")], stderr=subprocess.PIPE,
                                text=True, env={**env, "DS4_LOCK_FILE": str(lock)})
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 1 and "cannot open model" in err  # past the stale pid, to the model
        assert lock.read_text() == f"{proc.pid}\n"  # truncated and rewritten, left behind at exit


def test_a_real_server_stopped_while_it_opens_its_model(engine, tmp_path):
    """The real first SIGTERM only sets a flag; an open() that blocks is interrupted (no SA_RESTART)."""
    lock = tmp_path / "ds4.lock"
    proc = hold_real(engine, lock, tmp_path / "fifo")
    assert stop(proc, signal.SIGTERM) == 1
    assert "Interrupted system call" in proc.stderr.read()


def test_an_unopenable_lock_file_is_exit_2(engine, sim_upstream, tmp_path):
    lock = tmp_path / "no-such-dir" / "ds4.lock"
    real, sim = run(engine.server, "-m", MAIN, lock=lock), run(sim_upstream, "-m", MAIN, lock=lock)
    assert real.returncode == sim.returncode == 2
    assert first_line(real) == first_line(sim) == f"ds4: failed to open lock file {lock}: No such file or directory"
