"""The simulated engine against the real one, where both can run here: command line, start-up order, lock,
log lines, routes.

The simulator stands in for the real engine where the real one cannot serve here (GB10 speeds, the fork's routes
and flags; the end-to-end tests). It plays upstream 8d57664 (the `upstream` flavour) and the fork: wherever it
and 8d57664 reach the same point, they must say the same thing and exit alike; where the versions differ
(b030961) the knowledge says so and is checked against each real one.
"""
from __future__ import annotations

import fcntl
import http.client
import os
import re
import signal
import socket
import subprocess
import sys

import pytest

from real_engine import REPO, stop, wait_for

from ds4_converge.engine.release import parse_help_flags
from ds4_converge.engine_knowledge import BASE, for_version

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
def test_a_second_server_on_the_same_lock_file_refuses_to_start(engine, engine_b030961, sim_upstream, tmp_path,
                                                                holder):
    """Two ds4-server processes with one DS4_LOCK_FILE: the second exits 2 naming the first, whichever of the
    programs each is (both real versions, the sim); the file keeps the holder's pid, and is created 0600."""
    lock = tmp_path / "ds4.lock"
    first = hold_real(engine, lock, tmp_path / "fifo") if holder == "real" else hold_sim(sim_upstream, lock, 18999)
    try:
        expected = f"ds4: another ds4 process is already running (pid {first.pid}); refusing to start"
        for second in (engine.server, engine_b030961.server, sim_upstream):
            proc = run(second, "-m", MAIN, lock=lock)
            assert proc.returncode == 2 and first_line(proc) == expected, proc.stderr
        assert lock.read_text() == f"{first.pid}\n" and (lock.stat().st_mode & 0o777) == 0o600
    finally:
        stop(first, signal.SIGKILL)
    # the pid stays behind: the file is no pid file, only the flock says who runs
    assert lock.read_text() == f"{first.pid}\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DS4_")}
    for second in (engine.server, engine_b030961.server, sim_upstream):
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


def test_an_unopenable_lock_file_is_exit_2(engine, engine_b030961, sim_upstream, tmp_path):
    lock = tmp_path / "no-such-dir" / "ds4.lock"
    real, newer = run(engine.server, "-m", MAIN, lock=lock), run(engine_b030961.server, "-m", MAIN, lock=lock)
    sim = run(sim_upstream, "-m", MAIN, lock=lock)
    assert real.returncode == newer.returncode == sim.returncode == 2
    assert first_line(real) == first_line(newer) == first_line(sim) == (
        f"ds4: failed to open lock file {lock}: No such file or directory")


# ------------------------------------------------------------------------- start order, log lines, routes

def _held(lock):
    """The lock file held by this test process, as a running ds4 process would hold it."""
    handle = open(lock, "w")
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


# each case fails two steps at once; the step reported is the first in the start order
ORDER_CASES = {
    ("options", "lock"): ["--bogus"],
    ("chdir", "lock"): ["--chdir", "/nonexistent-dir", "-m", "/nonexistent.gguf"],
    ("lock", "model"): ["-m", "/nonexistent.gguf"],
}
STEP_OF = [("unknown option", "options"), ("chdir", "chdir"), ("already running", "lock"),
           ("cannot open model", "model")]


def _step(proc) -> str:
    line = first_line(proc)
    return next(step for text, step in STEP_OF if text in line)


@pytest.mark.parametrize("case", ORDER_CASES, ids=lambda c: " before ".join(c))
def test_start_order_per_version_and_the_sim_plays_8d57664(engine, engine_b030961, sim_upstream, tmp_path, case):
    lock = tmp_path / "ds4.lock"
    holder = _held(lock)
    try:
        seen = {}
        for name, binary in (("8d57664", engine.server), ("b030961", engine_b030961.server), ("sim", sim_upstream)):
            seen[name] = _step(run(binary, *ORDER_CASES[case], lock=lock))
    finally:
        holder.close()
    for version in ("8d57664", "b030961"):
        order = for_version(version)["start_order"]
        assert seen[version] == min(case, key=order.index), (version, seen)
    assert seen["sim"] == seen["8d57664"]


def test_the_sims_log_lines_are_8d57664s():
    """The lines the tool reads from the log, as the simulator prints them, are 8d57664's (the version it plays;
    the knowledge of each is checked against its source in test_knowledge.py)."""
    source = (REPO / "engine" / "sim" / "ds4_server.py").read_text()
    for name, line in for_version(BASE)["logs"].items():
        if name != "stamp":
            assert f'"{line}' in source, name
    assert for_version("b030961")["logs"]["kv_persist"] not in source


@pytest.fixture(scope="module")
def sim_fork(sim_repo, tmp_path_factory):
    tree = tmp_path_factory.mktemp("sim-fork") / "ds4"
    subprocess.run(["git", "clone", "-q", "-c", "advice.detachedHead=false", "-b", "v0.2.0", str(sim_repo),
                    str(tree)], check=True)
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    subprocess.run(["make", "cpu", f"PYTHON={python}"], cwd=tree, check=True, capture_output=True)
    return tree / "ds4-server"


@pytest.mark.parametrize("flavour, version", [("upstream", "8d57664"), ("fork", "fork")])
def test_the_sim_serves_the_routes_of_the_version_it_plays(request, tmp_path, flavour, version):
    """Every route the knowledge lists answers (POSTs with a bad body: 400, not 404), and no other: the fork's
    /metrics and /v1/stats only in the fork flavour, /health nowhere."""
    binary = request.getfixturevalue("sim_upstream" if flavour == "upstream" else "sim_fork")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DS4_")}
    proc = subprocess.Popen([str(binary), "-m", str(MAIN), "--port", str(port)], stderr=subprocess.DEVNULL,
                            env={**env, "DS4_LOCK_FILE": str(tmp_path / "l"), "DS4_SIM_LOAD_SECONDS": "0"})

    def status(method, path, body=None):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
        answer = conn.getresponse()
        answer.read()
        conn.close()
        return answer.status

    try:
        assert wait_for(lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0, timeout=20)
        routes = for_version(version)["routes"]
        for path in routes["GET"]:
            assert status("GET", path) == 200, path
        for path in routes["POST"]:
            assert status("POST", path, "{not json") == 400, path
        every = {p for v in ("8d57664", "b030961", "fork") for p in for_version(v)["routes"]["GET"]}
        for path in sorted(every - set(routes["GET"])) + ["/health"]:
            assert status("GET", path) == 404, path
    finally:
        assert stop(proc) == 0
