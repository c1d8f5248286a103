"""End-to-end fixtures: a real git repository of the simulated engine, real make, supervisord and HTTP.

Every converge runs the real `ds4-converge` command in a subprocess, as a person would (see boxes.py).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from boxes import REPO, Box, free_port


def _make_sim_repo():
    spec = importlib.util.spec_from_file_location("make_sim_repo", REPO / "engine" / "make_sim_repo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
