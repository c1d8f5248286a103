"""The real engine for the conformance suite: built once per session (and cached across sessions)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import real_engine


@pytest.fixture(scope="session")
def engine() -> real_engine.RealEngine:
    """The upstream ds4 tree built with `make cpu`; the tests that need it skip only when the tarball is absent."""
    archive = real_engine.tarball()
    if archive is None:
        pytest.skip(f"no engine tarball (set {real_engine.TARBALL_ENV} or provide {real_engine.DEFAULT_TARBALL})")
    return real_engine.build(archive)


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
