"""make targets, the sim repo (make_sim_repo.py), tiny GGUFs."""

import os
import shutil
import stat
import subprocess

import pytest

from engine_sim_support import MODELS, PYTHON, clean_env, run

import make_sim_repo  # noqa: E402
import make_tiny_gguf  # noqa: E402

FAKE_NVCC = """#!/bin/sh
echo "nvcc: NVIDIA (R) Cuda compiler driver"
echo "Cuda compilation tools, release 13.0, V13.0.88"
echo "Build cuda_13.0.r13.0/compiler.36424714_0"
"""


@pytest.fixture
def src(builds, tmp_path):
    """A fresh clone of v0.3.0 (not built), the test's own."""
    return builds.clone("v0.3.0", tmp_path / "src")


def test_a_fresh_clone_leaves_the_session_builds_alone(fork, builds, src):
    """The fork build (v0.3.0, session-wide) stays built while tests clone the same tag for themselves."""
    again = builds.clone("v0.3.0")
    assert fork.is_file() and src != fork.parent != again, (src, fork, again)


@pytest.fixture
def nvcc(tmp_path):
    p = tmp_path / "cuda" / "bin" / "nvcc"
    p.parent.mkdir(parents=True)
    p.write_text(FAKE_NVCC)
    p.chmod(0o755)
    return p


def make(src, *args, env=None):
    e = clean_env(**(env or {}))
    for k in ("CUDA_HOME", "NVCC", "CUDA_ARCH", "PYTHON"):
        e.pop(k, None)
    return run(["make", *args], cwd=src, env=e)


def build_line(binary, tmp_path):
    """The server logs its build line before opening the model."""
    r = run([binary, "-m", tmp_path / "missing.gguf"], env=clean_env(DS4_LOCK_FILE=tmp_path / "bl.lock"))
    assert r.returncode == 1
    return next(ln for ln in r.stderr.splitlines() if "ds4: build " in ln)


def test_bare_make_prints_help(src):
    r = make(src)
    assert r.returncode == 0
    assert "cuda-spark" in r.stdout and "make cpu" in r.stdout
    assert not (src / "ds4-server").exists()


def test_cuda_without_arch_exit_2(src):
    r = make(src, "cuda", "PYTHON=" + PYTHON)
    assert r.returncode == 2
    assert "CUDA_ARCH" in r.stderr
    assert not (src / "ds4-server").exists()


def test_missing_nvcc_fails(src, tmp_path):
    r = make(src, "cuda-spark", "NVCC=/nonexistent", "PYTHON=" + PYTHON)
    assert r.returncode != 0
    assert "/nonexistent" in r.stderr
    assert not (src / "ds4-server").exists()
    # the default nvcc is $(CUDA_HOME)/bin/nvcc, never PATH's
    r = make(src, "cuda-generic", "CUDA_HOME=%s" % (tmp_path / "nocuda"), "PYTHON=" + PYTHON)
    assert r.returncode != 0
    assert str(tmp_path / "nocuda" / "bin" / "nvcc") in r.stdout + r.stderr


def test_cuda_build_records_nvcc_and_arch(src, nvcc, tmp_path):
    r = make(src, "cuda", "CUDA_ARCH=sm_90", "NVCC=%s" % nvcc, "PYTHON=" + PYTHON)
    assert r.returncode == 0, r.stderr
    assert "-arch=sm_90" in r.stdout
    assert os.access(src / "ds4-server", os.X_OK)
    assert not (src / "ds4").exists() and not (src / "ds4-bench").exists()  # the tool runs only ds4-server
    first = (src / "ds4-server").read_bytes().split(b"\n", 1)[0]
    assert first == b"#!" + shutil.which(PYTHON).encode()
    line = build_line(src / "ds4-server", tmp_path)
    assert line.endswith("ds4: build target=cuda arch=sm_90 nvcc=13.0.88 flavour=fork")
    # objects depend on sources only: a new arch without `make clean` relinks the old object
    r = make(src, "cuda-generic", "NVCC=/nonexistent", "PYTHON=" + PYTHON)
    assert r.returncode == 0, r.stderr
    assert "build target=cuda-generic arch=sm_90 " in build_line(src / "ds4-server", tmp_path)
    assert make(src, "clean").returncode == 0
    assert not (src / "ds4-server").exists() and not list(src.glob("*.o"))
    r = make(src, "cuda-spark", "CUDA_HOME=%s" % nvcc.parent.parent, "PYTHON=" + PYTHON)
    assert r.returncode == 0, r.stderr
    assert "-arch" not in r.stdout
    assert "build target=cuda-spark arch= nvcc=13.0.88" in build_line(src / "ds4-server", tmp_path)


def test_cpu_build_has_no_nvcc(src, tmp_path):
    r = make(src, "cpu", "NVCC=/nonexistent", "PYTHON=" + PYTHON)
    assert r.returncode == 0, r.stderr
    assert "build target=cpu arch= nvcc=none flavour=fork" in build_line(src / "ds4-server", tmp_path)
    mode = (src / "ds4-server").stat().st_mode
    assert mode & stat.S_IXUSR


def test_build_fails_tag(builds):
    d = builds.clone("v0.3.1-build-fails")
    r = make(d, "cpu", "PYTHON=" + PYTHON)
    assert r.returncode != 0
    assert "error:" in r.stderr
    assert not (d / "ds4-server").exists()


def test_build_fails_env_at_build_time(src):
    r = make(src, "cpu", "PYTHON=" + PYTHON, env={"DS4_SIM_FAULT": "build-fails"})
    assert r.returncode != 0 and "error:" in r.stderr


def test_built_server_needs_no_third_party_packages(upstream, tmp_path):
    # run with an isolated interpreter: no site-packages at all
    r = subprocess.run([PYTHON, "-I", "-S", str(upstream), "--help"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, env=clean_env(DS4_LOCK_FILE=tmp_path / "l"))
    assert r.returncode == 0, r.stderr


# ------------------------------------------------------------------ sim repo

def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, check=True).stdout.strip()


EXPECTED_TAGS = {"v0.1.0", "v0.2.0", "v0.3.0", "v0.3.1-crash-at-start", "v0.3.1-crash-after", "v0.3.1-hang",
                 "v0.3.1-wrong-model", "v0.3.1-wrong-answer", "v0.3.1-build-fails", "v0.3.1-dsml-as-text",
                 "v0.3.1-poisoned", "v0.3.1-empty-stream"}


def test_sim_repo_layout(sim_repo):
    repo, tags = sim_repo
    assert set(tags) == EXPECTED_TAGS
    for t, sha in tags.items():
        assert git(repo, "rev-parse", t + "^{commit}") == sha
    assert git(repo, "rev-parse", "main") == tags["v0.3.0"]
    assert git(repo, "rev-list", "--count", "main") == "3"
    assert git(repo, "show", "v0.1.0:FLAVOUR") == "upstream"
    assert git(repo, "show", "v0.2.0:FLAVOUR") == "fork"
    assert git(repo, "show", "v0.2.0:VERSION") == "0.2.0"
    assert git(repo, "show", "v0.3.0:VERSION") == "0.3.0"
    install = git(repo, "show", "v0.3.0:install.sh")
    assert 'DS4_REPO="${DS4_REPO:-https://github.com/Entrpi/ds4.git}"' in install
    assert 'DS4_REF="${DS4_REF:-v0.2.0}"' in install
    for t in EXPECTED_TAGS - {"v0.1.0", "v0.2.0", "v0.3.0"}:
        assert git(repo, "rev-parse", t + "^") == tags["v0.2.0"]
        assert git(repo, "diff", "--name-only", "v0.2.0", t) == "sim.conf"
    assert "fault = crash-after:3" in git(repo, "show", "v0.3.1-crash-after:sim.conf")
    assert git(repo, "status", "--porcelain") == ""


def test_sim_repo_is_deterministic_and_idempotent(sim_repo, tmp_path):
    repo, tags = sim_repo
    other = tmp_path / "again"
    assert make_sim_repo.build(other) == tags
    refs_before = git(other, "for-each-ref")
    snapshot = {p: p.stat().st_mtime_ns for p in (other / ".git").rglob("*")}
    assert make_sim_repo.build(other) == tags
    assert git(other, "for-each-ref") == refs_before
    assert {p: p.stat().st_mtime_ns for p in (other / ".git").rglob("*")} == snapshot
    # a moved tag is put back
    git(other, "tag", "-f", "v0.2.0", "v0.1.0")
    assert make_sim_repo.build(other) == tags
    assert git(other, "rev-parse", "v0.2.0") == tags["v0.2.0"]


def test_sim_repo_clone_depth_1_by_tag(sim_repo, tmp_path):
    repo, tags = sim_repo
    d = tmp_path / "shallow"
    r = run(["git", "clone", "-q", "--depth", "1", "-b", "v0.3.1-hang", "file://%s" % repo, str(d)])
    assert r.returncode == 0, r.stderr
    assert git(d, "rev-parse", "HEAD") == tags["v0.3.1-hang"]


# ------------------------------------------------------------------ tiny GGUFs

def test_tiny_gguf_is_deterministic(tmp_path):
    for p in make_tiny_gguf.build(tmp_path):
        committed = MODELS / p.name
        assert committed.read_bytes() == p.read_bytes(), p.name
        assert p.stat().st_size < 8192
