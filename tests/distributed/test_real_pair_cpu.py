"""The real b030961 through the real `ds4-converge` CLI: one box converged as a worker, then as a coordinator.

A worker converges (its health: loaded, its data port accepts; not /v1/models), `status` says it is not
connected to its coordinator, and a restart stops it with a second SIGTERM, not its grace. The same box as a
coordinator: a CPU build refuses it at once (`ds4_session_create` in ds4.c), and the tool says so with the
engine's own words and exit 1, then puts the worker back — never a hang or a probe timeout. A hung worker is
stopped after its short grace.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

import real_engine
from boxes import Box, engine_pids, free_port

pytestmark = pytest.mark.slow
GIT_ENV = {"GIT_AUTHOR_NAME": "ds4", "GIT_AUTHOR_EMAIL": "ds4@invalid", "GIT_COMMITTER_NAME": "ds4",
           "GIT_COMMITTER_EMAIL": "ds4@invalid", "GIT_AUTHOR_DATE": "2026-08-05T00:00:00Z",
           "GIT_COMMITTER_DATE": "2026-08-05T00:00:00Z"}


@pytest.fixture(scope="module")
def b030961_repo(engine_b030961, tmp_path_factory):
    tree = real_engine.unpack(engine_b030961.tarball, tmp_path_factory.mktemp("b030961") / "src")
    env = {**os.environ, **GIT_ENV}
    for argv in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"],
                 ["git", "commit", "-q", "-m", "antirez/ds4 b030961"], ["git", "tag", "b030961"]):
        subprocess.run(argv, cwd=tree, env=env, check=True, capture_output=True)
    return tree


def test_a_worker_converges_and_a_coordinator_on_cpu_is_refused_truthfully(b030961_repo, tmp_path):
    from distributed import slice_gguf

    worker_model = slice_gguf.write(tmp_path / "w.gguf", "42:output")
    coordinator_model = slice_gguf.write(tmp_path / "c.gguf", "0:1")
    box = Box(tmp_path / "root", b030961_repo, free_port())
    data_port, coordinator_port = free_port(), free_port()
    box.spec = {
        "engine": {"repo": str(b030961_repo), "ref": "b030961", "target": "cpu", "jobs": 2},
        "model": {"main": str(worker_model)},
        "server": {"port": box.port, "ctx": 4096, "stop_wait_s": 120},
        "health": {"deadline_s": 30, "soak_s": 1, "interval_s": 0.2},
        "paths": {"root": str(box.root)},
        "distributed": {"role": "worker", "layers": "42:output", "listen": {"host": "127.0.0.1", "port": data_port},
                        "coordinator": {"host": "127.0.0.1", "port": coordinator_port}},
    }
    box.write()
    try:
        # -O0: the same Makefile and sources, compiled in a fraction of the time
        rc, document = box.converge(env={"CFLAGS": "-O0 -std=c99 -w"})
        assert rc == 0 and document["ok"], document
        (probe,) = [r for r in document["roles"] if r["name"] == "probe"]
        assert "worker up, not connected to its coordinator" in probe["msg"], probe
        status = box.status()
        assert status["healthy"] and status["distributed"]["connected"] is False, status
        assert f"127.0.0.1:{coordinator_port}" in status["distributed"]["line"]  # reaching for it, or retrying

        # the same box as the coordinator of a pair: refused at once by the CPU build, the worker put back
        with box.edited({"model.main": str(coordinator_model), "distributed": {
                "role": "coordinator", "layers": "0:1", "listen": {"host": "127.0.0.1", "port": coordinator_port}}}):
            began = time.monotonic()
            rc, document = box.converge()
            took = time.monotonic() - began
        assert rc == 1 and document["reverted"], document["error"]
        error = document["error"]
        assert "ds4-server exited (exit status 1" in error, error
        assert "ds4: distributed coordinator sessions require the graph backend" in error, error
        assert "not ready within" not in error
        # the worker that was stopped to make room went with a second SIGTERM, not its 120 s grace
        assert took < 60, f"{took:.0f}s"
        status = box.status()
        assert status["healthy"] and status["distributed"]["role"] == "worker", status

        # a hung worker (stopped: no signal handler runs) is killed after distributed.stop_grace_s (5 s), not
        # after server.stop_wait_s (120 s), by `ds4-converge stop` too: supervisord's stopwaitsecs and the
        # tool's own wait are both the short grace (with both at stop_wait_s this stop took 124 s)
        os.kill(status["pid"], signal.SIGSTOP)
        began = time.monotonic()
        proc = box.cli("stop", str(box.spec_path))
        took = time.monotonic() - began
        assert proc.returncode == 0, proc.stderr
        assert took < 60, f"{took:.0f}s"
        assert status["pid"] not in engine_pids(box.root)
    finally:
        box.stop()
