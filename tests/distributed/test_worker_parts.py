"""A worker's command line, program file and health reading, without starting anything."""
from __future__ import annotations

from pathlib import Path

import pytest

from ds4_converge.engine.release import Release, Toolkit
from ds4_converge.engine.server_args import ModelPaths, UnsupportedSettings, server_argv
from ds4_converge.health.worker import listen_of, read_state
from ds4_converge.service import render
from ds4_converge.service.supervisor import IGNORES_FIRST_TERM
from ds4_converge.spec.model import Distributed, Server

BASE = {"--model", "--ctx", "--host", "--port"}
WORKER = Distributed(role="worker", layers="22:output", listen={"host": "0.0.0.0", "port": 9001},
                     coordinator={"host": "10.0.0.1", "port": 9000})


def _release(flags) -> Release:
    return Release(id="r", path=Path("/opt/r"), commit="a" * 40, ref="b030961", target="cpu", cuda_arch=None,
                   toolkit=Toolkit(), flags=frozenset(flags))


def test_a_worker_gets_its_distributed_flags_and_an_old_build_refuses_them():
    argv = server_argv(_release(BASE | {"--role", "--layers", "--listen", "--coordinator"}), Server(ctx=4096),
                       ModelPaths(Path("/m.gguf")), None, WORKER)
    assert argv[-10:] == ["--role", "worker", "--layers", "22:output", "--listen", "0.0.0.0", "9001",
                          "--coordinator", "10.0.0.1", "9000"]
    assert listen_of(argv) == WORKER.listen
    assert listen_of(argv[:-10]) is None
    with pytest.raises(UnsupportedSettings, match=r"distributed needs --role.*b030961 or later"):
        server_argv(_release(BASE), Server(), ModelPaths(Path("/m.gguf")), None, WORKER)


def test_a_worker_program_file_says_it_needs_a_second_sigterm():
    conf = dict(name="w", release="r", argv=["/bin/true"], directory="/", log="/l", user=None, stop_wait_s=5)
    worker, plain = render.program_conf(**conf, ignores_first_term=True), render.program_conf(**conf)
    assert IGNORES_FIRST_TERM in worker and "stopwaitsecs=5" in worker
    assert IGNORES_FIRST_TERM not in plain and "; stop:" not in plain


def test_the_last_connection_line_of_the_last_start_tells_whether_it_is_connected():
    started = ("ds4: distributed worker: layers 22:output model_id=0 data_listen=0.0.0.0:9001 connecting to "
               "coordinator 10.0.0.1:9000")
    retry = "ds4: distributed worker: unable to connect to 10.0.0.1:9000: Connection refused; retrying"
    connected = "ds4: distributed worker: connected to coordinator 10.0.0.1:9000"
    lost = "ds4: distributed worker: coordinator disconnected after error; reconnecting"
    assert not read_state("ds4: memory: KV 0.43 GiB\n").started
    assert read_state(f"{started}\n{retry}\n").describe().startswith("not connected to its coordinator (ds4: dis")
    assert read_state(f"{started}\n{retry}\n{connected}\nrejected unsupported frame type 1\n").connected
    assert not read_state(f"{connected}\n{lost}\n").connected
    assert not read_state(f"{connected}\n{started}\n").connected  # a new start: not connected until it says so
    # what the H200 pair's worker log held after a SIGKILL: supervisord's restart is loading, not connected
    reloading = f"{started}\n{connected}\nds4: Linux cuda backend set oom_score_adj=1000\nds4: memory: KV 0.46 GiB " \
                "(raw 0.36 + compressed 0.11) + buffers 0.06 GiB + resident model 39.25 GiB = 39.78 GiB planned\n"
    assert not read_state(reloading).started and not read_state(reloading).connected
    assert read_state(reloading).describe() == "not started yet (loading)"


def test_a_stale_connected_line_is_not_believed_while_the_data_port_refuses():
    """The H200 pair: after a SIGKILL supervisord restarted the worker; for a while its log's last line still said
    "connected" while the new process loaded and its data port refused. Log and port are judged together."""
    import socket

    from boxes import free_port
    from ds4_converge.health.worker import judge, observe
    from ds4_converge.spec.model import Address

    log = ("ds4: distributed worker: layers 22:output model_id=0 data_listen=127.0.0.1:9001 connecting to "
           "coordinator 127.0.0.1:9000\nds4: distributed worker: connected to coordinator 127.0.0.1:9000\n")
    closed = Address(host="127.0.0.1", port=free_port())
    stale = observe(log, closed)
    assert not stale.started and not stale.connected
    assert judge(stale).startswith(f"nothing accepts on its data port {closed}; its log's last word: ds4: dist")
    with socket.create_server(("127.0.0.1", 0)) as listening:
        live = observe(log, Address(host="127.0.0.1", port=listening.getsockname()[1]))
        assert live.connected and judge(live) is None
