"""Build and run the real engine through the real `ds4-converge` CLI.

The upstream tree from the tarball is the engine repository (a git repository made from it), target cpu. The
release is built, its provenance recorded, its flags read from the real `--help`; the engine is started with a
model whose metadata the real engine accepts, and it dies at its tensor check (the tiny model has no weights):
a first install, reported with the real exit status and the real log line, and left stopped.
"""
from __future__ import annotations

import json
import os
import subprocess

import pytest

import real_engine
from boxes import MODEL, Box, free_port

from ds4_converge.engine_knowledge import load as load_knowledge

K = load_knowledge()
GIT_ENV = {"GIT_AUTHOR_NAME": "ds4", "GIT_AUTHOR_EMAIL": "ds4@invalid", "GIT_COMMITTER_NAME": "ds4",
           "GIT_COMMITTER_EMAIL": "ds4@invalid", "GIT_AUTHOR_DATE": "2026-05-21T00:00:00Z",
           "GIT_COMMITTER_DATE": "2026-05-21T00:00:00Z"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def upstream_repo(engine, tmp_path_factory):
    """A git repository of the upstream source, as the tarball has it (tag = the upstream commit)."""
    tree = real_engine.unpack(engine.tarball, tmp_path_factory.mktemp("upstream") / "src")
    env = {**os.environ, **GIT_ENV}
    for argv in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"],
                 ["git", "commit", "-q", "-m", f"antirez/ds4 {K['upstream']['commit']}"],
                 ["git", "tag", K["upstream"]["commit"]]):
        subprocess.run(argv, cwd=tree, env=env, check=True, capture_output=True)
    return tree


def test_first_install_of_the_real_engine_dies_at_model_load_and_says_so(upstream_repo, tmp_path):
    box = Box(tmp_path / "root", upstream_repo, free_port())
    box.spec = {
        "engine": {"repo": str(upstream_repo), "ref": K["upstream"]["commit"], "target": "cpu", "jobs": 2},
        "model": {"main": str(MODEL)},
        "server": {"port": box.port, "ctx": 4096, "stop_wait_s": 10},
        "health": {"deadline_s": 30, "soak_s": 1, "interval_s": 0.2},
        "paths": {"root": str(box.root)},
    }
    box.write()
    # -O0: the same Makefile and sources, compiled in a fifth of the time (what is tested does not depend on it)
    rc, document = box.converge(env={"CFLAGS": "-O0 -std=c99 -w"})
    try:
        roles = {r["name"]: r for r in document["roles"]}
        assert roles["models"]["status"] in ("ok", "changed"), roles["models"]  # its GGUF identity: a main model
        assert roles["engine"]["status"] == "changed", roles["engine"]

        # built, with its provenance and the flags the real --help lists
        (release,) = [p for p in (box.root / "releases").iterdir() if not p.name.startswith(".")]
        record = json.loads((release / "ds4-converge-release.json").read_text())
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=upstream_repo, capture_output=True,
                                text=True).stdout.strip()
        assert (record["commit"], record["ref"], record["target"]) == (commit, K["upstream"]["commit"], "cpu")
        assert set(record["flags"]) == set(K["flags"]["listed"])
        assert record["engine"] == K["upstream"]["commit"]  # the ref names it (the commit is this repo's own)
        assert "make -j2 cpu" in (release / "build.log").read_text()
        assert release.name.startswith(commit[:12] + "-cpu-")

        # started, died at the tensor check: reported with the real exit status and the real line
        assert rc == 1 and not document["ok"] and not document["reverted"], document
        error = document["error"]
        assert "ds4-server exited (exit status 1" in error, error
        assert "ds4: required tensor is missing: output_hc_base.weight" in error, error
        assert "no last good release to revert to (first install): the engine is left stopped" in error
        assert "ds4-converge logs" in document["detail"]
        assert box.status()["pid"] is None

        logs = box.cli("logs", str(box.spec_path))
        assert "ds4: required tensor is missing: output_hc_base.weight" in logs.stdout
    finally:
        box.stop()
