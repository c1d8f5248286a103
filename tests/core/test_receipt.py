"""The no-op receipt (orchestrate/receipt.py, cli/noop.py): it holds only while everything it recorded is as it was.

Each check is tried on its own against a receipt that holds: the spec's bytes, the arguments, the environment,
the tool, the age of the host facts, the driver, a file, a process, and the endpoint's answer.
"""
from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ds4_converge.cli import noop
from ds4_converge.orchestrate import receipt

MODEL_ID = "deepseek-v4-flash"


class Engine(BaseHTTPRequestHandler):
    """/v1/models as the engine answers it; the test sets what it answers."""

    status, body, chunked = 200, {"data": [{"id": MODEL_ID}]}, False

    def do_GET(self):
        payload = json.dumps(self.body).encode()
        self.send_response(self.status)
        if self.chunked:
            self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def engine():
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Answers", (Engine,), {}))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.005}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def holding(tmp_path, engine):
    """A spec, a file the no-op read, a live process, and a receipt of all of them that holds."""
    spec = tmp_path / "spec.yaml"
    spec.write_text("server: {ctx: 32768}\n")
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    process = subprocess.Popen(["sleep", "60"])
    made = receipt.make(receipt.inputs(spec, ["server.port=8001"]), root=tmp_path, files=[str(model)],
                        processes={"ds4": process.pid}, endpoint=f"http://127.0.0.1:{engine.server_port}",
                        model_id=MODEL_ID, document={"ok": True}, facts_at=time.time())
    assert receipt.still_holds(made, receipt.inputs(spec, ["server.port=8001"])) is None
    yield spec, model, process, made
    process.kill()
    process.wait()


def why(spec, made, arguments=("server.port=8001",)):
    return receipt.still_holds(made, receipt.inputs(spec, list(arguments)))


def test_one_byte_of_the_spec(holding):
    spec, _, _, made = holding
    spec.write_text("server: {ctx: 32769}\n")
    assert why(spec, made) == "spec changed"


def test_other_arguments(holding):
    spec, _, _, made = holding
    assert why(spec, made, ["server.port=8002"]) == "arguments changed"
    assert why(spec, made, []) == "arguments changed"


def test_the_environment(holding, monkeypatch):
    spec, _, _, made = holding
    monkeypatch.setenv("CUDA_HOME", "/usr/local/cuda-13.2")
    assert why(spec, made) == "env changed"


def test_what_changes_between_two_identical_invocations_is_not_the_environment(holding, monkeypatch):
    spec, _, _, made = holding
    monkeypatch.setenv("SSH_CONNECTION", "10.0.0.9 50123 10.0.0.1 22")
    monkeypatch.setenv("OLDPWD", "/somewhere/else")
    assert why(spec, made) is None


def test_the_make_that_runs_the_tool_is_not_a_change_of_environment(holding, monkeypatch):
    """make run, then the same command from a shell: make's own variables are not what the run does (its commands
    do not get them: core/shell.py)."""
    spec, _, _, made = holding
    for name, value in {"MAKEFLAGS": " -- SPEC=spec/examples/sim.yaml", "MFLAGS": "", "MAKELEVEL": "1",
                        "MAKE_TERMOUT": "/dev/pts/0", "MAKE_TERMERR": "/dev/pts/0"}.items():
        monkeypatch.setenv(name, value)
    assert why(spec, made) is None


def test_the_tools_commands_are_not_sub_makes_of_the_make_that_runs_it(monkeypatch):
    from ds4_converge.core.shell import run

    monkeypatch.setenv("MAKEFLAGS", "-j8 --jobserver-auth=fifo:/tmp/GMfifo1")
    monkeypatch.setenv("MAKELEVEL", "1")
    seen = run(["env"], env={"EXTRA": "kept"}).splitlines()
    assert "EXTRA=kept" in seen and not any(line.startswith(("MAKEFLAGS=", "MAKELEVEL=")) for line in seen), seen


def test_another_version_of_the_tool(holding, monkeypatch, tmp_path):
    spec, _, _, made = holding
    tool = tmp_path / "tool"
    tool.mkdir()
    (tool / "x.py").write_text("")
    monkeypatch.setattr(receipt, "PACKAGE", tool)
    assert why(spec, made) == "tool changed"


def test_host_facts_older_than_the_fact_cache_allows(holding):
    spec, _, _, made = holding
    assert receipt.still_holds(made, receipt.inputs(spec, ["server.port=8001"]),
                               now=time.time() + receipt.FACTS_TTL_S + 1) == \
        "host facts are older than the fact cache allows"


def test_a_driver_upgrade(holding, monkeypatch, tmp_path):
    spec, _, _, made = holding
    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05\n")
    monkeypatch.setattr(receipt, "DRIVER_VERSION", version)
    assert why(spec, made) == "the GPU driver changed"


@pytest.mark.parametrize("change", ["touch", "rewrite same size", "chmod", "replace", "remove"])
def test_a_file_the_noop_read(holding, change):
    spec, model, _, made = holding
    if change == "touch":
        os.utime(model, ns=(time.time_ns(), time.time_ns() + 10**9))
    elif change == "rewrite same size":
        stat = model.stat()
        model.write_bytes(b"FUGG")
        os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # even with the old mtime: ctime moves
    elif change == "chmod":
        model.chmod(0o600)
    elif change == "replace":
        other = model.with_name("other")
        other.write_bytes(b"GGUF")
        os.replace(other, model)
    else:
        model.unlink()
    assert why(spec, made) == f"{model} changed"


def test_a_process_that_is_gone(holding):
    spec, _, process, made = holding
    process.kill()
    process.wait()
    assert why(spec, made) == f"ds4 (pid {process.pid}) is not the process it was"


@pytest.mark.parametrize("answer", ["503", "another model", "chunked", "not json", "nobody listens"])
def test_an_endpoint_that_does_not_answer_as_it_did(holding, engine, answer):
    spec, _, _, made = holding
    handler = engine.RequestHandlerClass
    if answer == "503":
        handler.status = 503
    elif answer == "another model":
        handler.body = {"data": [{"id": "something-else"}]}
    elif answer == "chunked":
        handler.chunked = True
    elif answer == "not json":
        handler.body = "<html>"
    else:
        engine.shutdown()
        engine.server_close()
    assert why(spec, made) is not None


@pytest.mark.parametrize("argv, parsed", [
    (["spec.yaml"], ("spec.yaml", [], False, False)),
    (["spec.yaml", "--json", "--set", "server.ctx=65536", "--set=server.port=9000"],
     ("spec.yaml", ["server.ctx=65536", "server.port=9000"], True, False)),
    (["spec.yaml", "--json", "--check"], ("spec.yaml", [], True, True)),  # the fleet role's plan
    (["spec.yaml", "--check"], None),  # text: a plan's lines are not a converge's
    (["spec.yaml", "--json", "--check", "--diff"], None),
    (["spec.yaml", "--diff"], None),
    (["spec.yaml", "--refresh"], None),
    (["spec.yaml", "--set"], None),
    (["status", "spec.yaml"], None),
    (["--json", "spec.yaml"], None),
])
def test_only_a_plain_converge_is_answered_from_a_receipt(argv, parsed):
    got = noop.fast_arguments(argv, {"status": None, "converge": None})
    assert (None if got is None else (str(got[0]), *got[1:])) == parsed


def test_receipts_are_kept_per_user_and_spec_file(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    one, two = tmp_path / "a.yaml", tmp_path / "b.yaml"
    assert receipt.receipt_path(one).parent == tmp_path / "cache" / "ds4-converge" / "noop"
    assert receipt.receipt_path(one) != receipt.receipt_path(two)
    (tmp_path / "link.yaml").symlink_to(one)
    assert receipt.receipt_path(tmp_path / "link.yaml") == receipt.receipt_path(one)
