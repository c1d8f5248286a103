"""Shared fixtures, and which tests are slow.

End-to-end fixtures: a real git repository of the simulated engine, real make, supervisord and HTTP; every
converge runs the real `ds4-converge` command in a subprocess, as a person would (see boxes.py). The fake host
(fakehost.py) serves both the fact executor and the real CLI.

Slow (`-m "not slow"` leaves them out; `make test-fast` does): every test under an end-to-end folder, and every
test that uses a fixture which starts real things (a box, the engine's git repository, the CLI on a fake host, an
HTTP file server), and those marked so by hand (the CLI or pytest itself in a subprocess).
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

# first: the run's own temporary folder, before anything makes a temporary file (a killed run leaves nothing)
import run_tmp  # noqa: F401
import pytest
from hypothesis import settings

from boxes import REPO, Box, free_port
from fakehost import FakeHost
# every test has a cache folder of its own, and one that changes the user's real one fails (user_cache_guard.py)
from user_cache_guard import pytest_runtest_setup, pytest_runtest_teardown, pytest_sessionfinish  # noqa: F401

# --no-skips and --no-leaks, which CI turns on (session_guard.py)
pytest_plugins = ["session_guard", "run_tmp"]


def _make_sim_repo():
    spec = importlib.util.spec_from_file_location("make_sim_repo", REPO / "engine" / "make_sim_repo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# make test-fast: a few examples of each property (make test runs each test's full count)
settings.register_profile("fast", max_examples=8)

SLOW_FOLDERS = {"e2e", "engine_sim", "fleet", "conformance", "realserve"}
SLOW_FIXTURES = {"box", "served_box", "sim_repo", "builds", "start", "upstream", "fork", "fake", "file_server"}


def pytest_sessionstart(session):
    """The Ansible collection ds4.converge is this checkout: link it where ansible.cfg looks (`make collection`),
    so every test that runs Ansible from here finds its module and role by their FQCN."""
    link = REPO / "build" / "collections" / "ansible_collections" / "ds4" / "converge"
    if not link.is_symlink():
        link.parent.mkdir(parents=True, exist_ok=True)
        tmp = link.with_name(f".converge.{os.getpid()}")
        tmp.symlink_to("../../../..")
        os.replace(tmp, link)


def pytest_ignore_collect(collection_path, config):
    """With -m "not slow", an all-slow folder is not even imported (make test-fast stays fast)."""
    if config.getoption("markexpr", "").replace(" ", "") == "notslow":
        parts = Path(collection_path).relative_to(REPO / "tests").parts if Path(collection_path).is_relative_to(
            REPO / "tests") else ()
        if parts and parts[0] in SLOW_FOLDERS:
            return True
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        folder = Path(str(item.fspath)).relative_to(REPO / "tests").parts[0]
        if folder in SLOW_FOLDERS or SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def sim_repo(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("engine") / "ds4-sim.git"
    _make_sim_repo().build(dest)
    return dest


@pytest.fixture
def box(tmp_path, sim_repo):
    made = Box(tmp_path / "root", sim_repo, free_port())
    yield made
    made.stop()


@pytest.fixture(scope="module")
def served_box(tmp_path_factory, sim_repo):
    """A box converged on v0.2.0 once per module, shared by tests that must leave it serving v0.2.0."""
    made = Box(tmp_path_factory.mktemp("served") / "root", sim_repo, free_port())
    rc, document = made.converge()
    assert rc == 0, document
    yield made
    made.stop()


@pytest.fixture
def fakehost(tmp_path) -> FakeHost:
    """The fake host's tools in a tmp dir, on nobody's PATH: for FactRunner(path=…) tests."""
    return FakeHost(tmp_path / "fakehost")


@pytest.fixture
def fake(fakehost, monkeypatch) -> FakeHost:
    """The fake host's tools first on PATH (the host's own nvcc/nvidia-smi hidden) for every CLI run of the test."""
    monkeypatch.setenv("PATH", fakehost.environ_path(os.environ["PATH"]))
    for name in ("CUDA_HOME", "NVCC", "CUDA_PATH", "LD_LIBRARY_PATH"):
        monkeypatch.delenv(name, raising=False)
    return fakehost
