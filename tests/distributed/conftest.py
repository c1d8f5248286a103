"""The real b030961 engine and sparse slice models for the distributed tests."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import real_engine
from distributed import slice_gguf


@pytest.fixture(scope="session")
def engine_b030961() -> real_engine.RealEngine:
    """Upstream b030961 (`make cpu`, cached like tests/conformance's fixture of the same name)."""
    return real_engine.built("b030961")


@pytest.fixture(scope="session")
def worker_model(tmp_path_factory):
    """The tensors of layers 42:output (sparse: a few KB on disk)."""
    return slice_gguf.write(tmp_path_factory.mktemp("slice") / "flash-42-output.gguf", "42:output")


@pytest.fixture(scope="session")
def coordinator_model(tmp_path_factory):
    """The tensors of layers 0:41 with the token embedding (sparse)."""
    return slice_gguf.write(tmp_path_factory.mktemp("slice") / "flash-0-41.gguf", "0:41")


GIT = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@invalid", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@invalid"}


def _git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT}).stdout.strip()


@pytest.fixture(scope="session")
def dist_repo(sim_repo, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The simulator's repository with `distributed = 1` tags on top of v0.2.0 and v0.3.0."""
    repo = tmp_path_factory.mktemp("dist") / "ds4-sim"
    _git("clone", "-q", str(sim_repo), str(repo), cwd=repo.parent)
    commits = {}
    for base in ("v0.2.0", "v0.3.0"):
        _git("checkout", "-q", base, cwd=repo)
        with open(repo / "sim.conf", "a") as conf:
            conf.write("distributed = 1\nretry_s = 0.3\n")
        _git("commit", "-q", "-am", f"{base} with distributed mode", cwd=repo)
        _git("tag", f"{base}-dist", cwd=repo)
        commits[f"{base}-dist"] = _git("rev-parse", "HEAD", cwd=repo)
    return repo, commits
