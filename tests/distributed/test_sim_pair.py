"""A coordinator and its worker through the real CLI and supervisord, on the simulated engine's distributed mode.

What the real pair did on an H200 (benchmarks/REPORT.md): the real coordinator binds its HTTP port right after its
load and answers every completion HTTP 500 "distributed route incomplete: missing layer N" until its worker has
joined. The simulator now does the same, so these tests show the probe waiting for the route (a late worker is
not a failed coordinator), the deadline's message naming what never arrived, and status agreeing with the probe
on a connected worker.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from boxes import Box, free_port

pytestmark = pytest.mark.slow


def _box(tmp_path, name, repo, part, deadline_s=30) -> Box:
    box = Box(tmp_path / name, repo, free_port())
    box.spec["engine"]["ref"] = "v0.3.0-dist"
    box.spec["health"]["deadline_s"] = deadline_s
    box.spec["distributed"] = part
    box.write()
    return box


@pytest.fixture
def pair(tmp_path, dist_repo):
    repo, _ = dist_repo
    dist_port, data_port = free_port(), free_port()
    made = {
        "coord": _box(tmp_path, "coord", repo, {"role": "coordinator", "layers": "0:21",
                                                "listen": {"host": "127.0.0.1", "port": dist_port}}),
        "work": _box(tmp_path, "work", repo, {"role": "worker", "layers": "22:output",
                                              "listen": {"host": "127.0.0.1", "port": data_port},
                                              "coordinator": {"host": "127.0.0.1", "port": dist_port}}),
    }
    yield made
    for box in made.values():
        box.stop()


def _chat(endpoint: str) -> tuple[int, dict]:
    body = json.dumps({"model": "deepseek-v4-flash", "max_tokens": 8, "stream": False, "thinking": {"type": "disabled"},
                       "messages": [{"role": "user", "content": "What is the capital of France?"}]}).encode()
    request = urllib.request.Request(f"{endpoint}/v1/chat/completions", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=20) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
    except OSError:
        return 0, {}


def test_the_coordinator_binds_at_once_and_its_probe_waits_for_a_late_worker(pair):
    coord, work = pair["coord"], pair["work"]
    converging = subprocess.Popen([sys.executable, "-m", "ds4_converge.cli", str(coord.spec_path), "--json"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, "NO_COLOR": "1",
                                       "XDG_CACHE_HOME": str(coord.user_cache)})
    try:
        # like the real coordinator: HTTP up before the route, completions refused in the engine's words
        until, seen = time.monotonic() + 60, (0, {})
        while time.monotonic() < until and seen[0] != 500:
            seen = _chat(coord.endpoint)
            time.sleep(0.2)
        assert seen[0] == 500, seen
        assert seen[1]["error"]["message"] == "distributed route incomplete: missing layer 22"
        assert converging.poll() is None, converging.communicate()  # a missing layer is not a verdict
        rc, document = work.converge()
        assert rc == 0, document
        out, err = converging.communicate(timeout=120)
    finally:
        if converging.poll() is None:
            converging.kill()
    assert converging.returncode == 0, (out, err)
    status, answer = _chat(coord.endpoint)
    assert status == 200 and "Paris" in answer["choices"][0]["message"]["content"], answer
    # the worker is connected, and status says it is healthy: the probe, status and the fleet facts agree
    code, worker_status = work.json("status", str(work.spec_path))
    assert code == 0 and worker_status["healthy"] and worker_status["distributed"]["connected"], worker_status
    # the worker gone: the coordinator still lists its model, but status asks what a client meets
    work.stop()
    code, coordinator_status = coord.json("status", str(coord.spec_path))
    assert code == 1 and "distributed route incomplete: missing layer 22" in coordinator_status["error"], \
        coordinator_status


def test_without_its_worker_the_coordinator_names_the_layers_that_never_arrived(pair):
    coord = pair["coord"]
    coord.spec["health"]["deadline_s"] = 4
    coord.write()
    started = time.monotonic()
    rc, document = coord.converge()
    assert rc == 1, document
    listen = f"127.0.0.1:{coord.spec['distributed']['listen']['port']}"
    assert "layers 22 onwards never arrived" in document["error"], document["error"]
    assert f"never joined this coordinator on {listen}" in document["error"], document["error"]
    assert time.monotonic() - started < 60  # the deadline, not a hang


def test_a_worker_refuses_token_ids_outside_its_vocabulary_as_the_real_one(dist_repo, tmp_path):
    """The simulated worker's check of a WORK's tokens (ds4_distributed.c: `WORK token id is outside the model
    vocabulary`), spoken to over its coordinator connection by this test playing the coordinator."""
    import socket

    import gguf

    from boxes import MODEL

    repo, _ = dist_repo
    vocab = len(gguf.GGUFReader(str(MODEL)).fields["tokenizer.ggml.tokens"].data)
    with socket.create_server(("127.0.0.1", 0)) as coordinator:
        work = _box(tmp_path, "work", repo, {"role": "worker", "layers": "22:output",
                                             "listen": {"host": "127.0.0.1", "port": free_port()},
                                             "coordinator": {"host": "127.0.0.1",
                                                             "port": coordinator.getsockname()[1]}})
        try:
            rc, document = work.converge()
            assert rc == 0, document
            coordinator.settimeout(30)
            conn, _ = coordinator.accept()
            replies = conn.makefile("rb")
            assert replies.readline().split() == [b"HELLO", b"22:output"]
            conn.sendall(f"WORK 0 1 {vocab - 1}\n".encode())
            assert replies.readline() == b"OK\n"
            conn.sendall(f"WORK 0 {vocab}\n".encode())
            assert replies.readline() == b"ERR WORK token id is outside the model vocabulary\n"
            conn.close()
        finally:
            work.stop()


def test_the_simulated_worker_says_and_does_what_the_real_cpu_worker_does(dist_repo, engine_b030961, worker_model,
                                                                          tmp_path):
    """Conformance of the simulator's worker to the real b030961 CPU worker, where both can run here: the lines
    of a start, a connection and a lost coordinator (addresses aside), and a data port that accepts while
    connected. (The real worker's layer work and the coordinator need a GPU: the H200 runs in benchmarks/.)"""
    import socket

    from distributed.test_real_worker import Worker

    from ds4_converge.health.worker import STARTED, data_port_open

    def lines(text: str) -> list[str]:
        said = [re.sub(r"\d+\.\d+\.\d+\.\d+:\d+", "H:P", line.split("distributed worker: ", 1)[1])
                for line in text.splitlines() if "distributed worker: " in line and "prefetch" not in line]
        return [line.replace("model_id=0 ", "") for line in said if "unable to connect" not in line]

    repo, _ = dist_repo
    seen = {}
    with socket.create_server(("127.0.0.1", 0)) as real_coordinator, \
            socket.create_server(("127.0.0.1", 0)) as sim_coordinator:
        real = Worker(engine_b030961, worker_model, tmp_path, coordinator_port=real_coordinator.getsockname()[1])
        sim = _box(tmp_path, "work", repo, {"role": "worker", "layers": "42:output",
                                            "listen": {"host": "127.0.0.1", "port": free_port()},
                                            "coordinator": {"host": "127.0.0.1",
                                                            "port": sim_coordinator.getsockname()[1]}})
        try:
            assert sim.converge()[0] == 0
            sim_log = sim.root / "logs" / f"{sim.spec.get('server', {}).get('name', 'ds4')}.log"
            for name, coordinator, text, listen in (
                    ("real", real_coordinator, real.text, real.listen),
                    ("sim", sim_coordinator, lambda: sim_log.read_text(errors="replace"), _listen(sim))):
                coordinator.settimeout(30)
                peer, _ = coordinator.accept()
                assert _wait(lambda: "connected to coordinator" in text()), text()
                assert all(data_port_open(listen) for _ in range(5)), (name, text())
                peer.close()
                assert _wait(lambda: "reconnecting" in text()), text()
                seen[name] = lines(text())
                assert STARTED.search(text())
        finally:
            sim.stop()
            real.proc.kill()
            real.proc.wait(10)
    assert seen["sim"][:2] == seen["real"][:2], seen  # the start line and the connection line
    for said in seen.values():  # a coordinator gone (the real one first reports the reset it read)
        assert re.match(r"coordinator disconnected( after error)?; reconnecting$", said[-1]), seen


def _listen(box: Box):
    from ds4_converge.spec.model import Address

    part = box.spec["distributed"]["listen"]
    return Address(host=part["host"], port=part["port"])


def _wait(condition, timeout: float = 15) -> bool:
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if condition():
            return True
        time.sleep(0.1)
    return condition()
