"""The facts on this machine: a smoke test of gather_host_facts and a real listening socket."""

from __future__ import annotations

import json
import os
from pathlib import Path
import platform
import pwd
import shutil
import socket

import pytest

from ds4_converge.facts import FactRunner, HostFacts, gather, gather_host_facts, observe, port_holders
from ds4_converge.facts.port import ProcNetListeners, SsListeners, blocks

# this machine's real commands and sockets: not for make test-fast
pytestmark = pytest.mark.slow


@pytest.fixture
def listening():
    """A socket of this test process listening on a free loopback port, whose number no IPv6 listener holds
    either: 127.0.0.1:P and [::]:P can be bound by two processes at once, and the facts rightly name both (a CI
    run of parallel tests met one). [::]:P stays bound, not listening, so nobody takes it while the test runs."""
    for _ in range(50):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        guard = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        guard.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            guard.bind(("::", sock.getsockname()[1]))
        except OSError:  # an IPv6 socket holds this number: another one
            sock.close()
            guard.close()
            continue
        with sock, guard:
            sock.listen()
            yield sock.getsockname()[1]
        return
    raise RuntimeError("no loopback port free on IPv6 too in 50 tries")


@pytest.mark.skipif(shutil.which("ss") is None, reason="no ss on this host")
def test_ss_finds_this_process(listening):
    found = gather(SsListeners(port=listening))
    assert [(entry.address, entry.port, entry.pid) for entry in found] == [("127.0.0.1", listening, os.getpid())]
    assert found[0].command  # e.g. "python3"


def test_proc_fallback_finds_this_process(listening):
    obs = observe(ProcNetListeners(port=listening))
    assert obs.probe.status == "ok"
    assert [(entry.address, entry.pid) for entry in obs.value] == [("127.0.0.1", os.getpid())]


def test_port_holders_has_cmdline(listening):
    (holder,) = port_holders(listening)
    assert holder.pid == os.getpid()
    # this process's own command line (under pytest-xdist a worker's is not pytest's)
    assert holder.cmdline == Path("/proc/self/cmdline").read_bytes().decode().split("\0")[:-1]


def test_fallback_used_when_ss_is_missing(fakehost, local, listening):
    (fakehost.tools / "ss").unlink(missing_ok=True)
    facts = gather_host_facts(port=listening, runner=fakehost.runner(), cuda_globs=[str(local / "cuda*")],
                              cuda_link=str(local / "cuda"))
    assert facts.status("port.SsListeners") == "missing"
    assert facts.status("port.ProcNetListeners") == "ok"
    (holder,) = facts.listeners
    assert holder.pid == os.getpid() and holder.command  # comm from /proc/PID/comm


def test_free_port_has_no_listeners(listening):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    assert port_holders(free) == []


def test_gather_host_facts_on_this_machine(tmp_path, listening):
    models = tmp_path / "models" / "ds4"           # does not exist yet
    facts = gather_host_facts(port=listening, model_dirs=[models, tmp_path], root="/")
    bad = {k: p for k, p in facts.probes.items() if p.status in ("unparsed", "timeout")}
    assert not bad, bad

    assert facts.arch == platform.machine()
    if shutil.which("nvidia-smi") is None:       # no GPU here: an empty list, not an error
        assert facts.gpus == [] and facts.status("gpu.NvidiaGpus") == "missing"
    if shutil.which("nvcc"):
        assert facts.cuda.path_nvcc is not None and facts.cuda.path_nvcc.version is not None

    assert facts.memory.total_bytes > 0
    assert 0 < facts.memory.available_bytes <= facts.memory.total_bytes
    assert facts.disk_root.exists and facts.disk_root.available_bytes > 0
    m = facts.disk_models[str(models)]
    assert not m.exists and m.measured_at == str(tmp_path) and m.available_bytes > 0
    assert facts.disk_models[str(tmp_path)].exists

    me = pwd.getpwuid(os.getuid())
    assert facts.service_user == me.pw_name and facts.service_home == me.pw_dir
    # this process holds 127.0.0.1:P; another may hold P on another address (127.0.0.2, say) at the same time, and
    # the facts rightly name it too (a CI run of parallel tests met one): the holders that block 127.0.0.1 are us
    assert [h.pid for h in facts.listeners if blocks(h.address, "127.0.0.1")] == [os.getpid()]

    text = facts.to_json()
    assert json.loads(text)["arch"] == facts.arch
    assert HostFacts.from_json(text) == facts


def test_unknown_service_user_is_none(fakehost, local):
    facts = gather_host_facts(port=1, service_user="no-such-user-ds4", runner=FactRunner(),
                              cuda_globs=[str(local / "cuda*")], cuda_link=str(local / "cuda"))
    assert facts.service_passwd is None and facts.service_home is None
    assert facts.status("users.Passwd") == "ok"


def test_hostfacts_defaults_for_rule_tests():
    facts = HostFacts(arch="aarch64")
    assert facts.gpus == [] and facts.cuda.nvccs == [] and facts.status("gpu.NvidiaGpus") is None
