"""The real engine for the conformance suite: built once per session (and cached across sessions)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import real_engine


@pytest.fixture(scope="session")
def engine() -> real_engine.RealEngine:
    """Upstream 8d57664, the older of the two versions tested."""
    return real_engine.built("8d57664")


@pytest.fixture(scope="session")
def engine_b030961() -> real_engine.RealEngine:
    """Upstream b030961: help topics, --power, --ssd-streaming, DSpark as `--mtp FILE --dspark`, distributed mode."""
    return real_engine.built("b030961")


@pytest.fixture(scope="session", params=real_engine.VERSIONS)
def each_engine(request) -> real_engine.RealEngine:
    """Each upstream version in turn, for facts that must hold for both."""
    return real_engine.built(request.param)


@pytest.fixture
def lock(tmp_path):
    """A DS4_LOCK_FILE of the test's own."""
    return tmp_path / "ds4.lock"


@pytest.fixture(scope="session")
def sim_upstream(sim_repo, tmp_path_factory) -> Path:
    """The simulated engine's upstream-flavour ds4-server (tag v0.1.0), built with `make cpu` like the real one."""
    tree = tmp_path_factory.mktemp("sim") / "ds4"
    subprocess.run(["git", "clone", "-q", "-c", "advice.detachedHead=false", "-b", "v0.1.0", str(sim_repo),
                    str(tree)], check=True)
    python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    subprocess.run(["make", "cpu", f"PYTHON={python}"], cwd=tree, check=True, capture_output=True)
    return tree / "ds4-server"
