"""Fixtures for the simulated ds4 engine: a sim repo, real `make cpu` builds from
clones of it, and a helper that runs ds4-server as a real process."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
ENGINE = REPO_ROOT / "engine"
MODELS = ENGINE / "models"
sys.path.insert(0, str(ENGINE))
sys.path.insert(0, str(MODELS))

import make_sim_repo  # noqa: E402

# build with a bare interpreter: the built programs must not need third-party packages
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
LOAD_SECONDS = "0.2"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run(cmd, cwd=None, env=None, timeout=60):
    return subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout)


@pytest.fixture(scope="session")
def sim_repo(tmp_path_factory):
    dest = tmp_path_factory.mktemp("simrepo") / "ds4"
    tags = make_sim_repo.build(dest)
    return dest, tags


class Builds:
    def __init__(self, repo, root):
        self.repo = repo
        self.root = root
        self.cache = {}

    def clone(self, tag):
        d = self.root / ("src-" + tag)
        if d.exists():
            shutil.rmtree(d)
        r = run(["git", "clone", "-q", "-c", "advice.detachedHead=false", "-b", tag, str(self.repo), str(d)])
        assert r.returncode == 0, r.stderr
        return d

    def build(self, tag, target=("cpu",)):
        key = (tag, tuple(target))
        if key not in self.cache:
            d = self.clone(tag)
            r = run(["make", *target, "PYTHON=" + PYTHON], cwd=d, env=clean_env())
            assert r.returncode == 0, r.stdout + r.stderr
            self.cache[key] = d
        return self.cache[key]


@pytest.fixture(scope="session")
def builds(sim_repo, tmp_path_factory):
    return Builds(sim_repo[0], tmp_path_factory.mktemp("builds"))


@pytest.fixture(scope="session")
def upstream(builds):
    return builds.build("v0.1.0") / "ds4-server"


@pytest.fixture(scope="session")
def fork(builds):
    return builds.build("v0.3.0") / "ds4-server"


@pytest.fixture(scope="session")
def model():
    return MODELS / "tiny-ds4flash.gguf"


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DS4_")}
    env["DS4_SIM_LOAD_SECONDS"] = LOAD_SECONDS
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Proc:
    """A ds4-server process with its stderr in a file."""

    def __init__(self, binary, args, env, log_path):
        self.log_path = log_path
        self.err = open(log_path, "w")
        self.p = subprocess.Popen([str(binary)] + [str(a) for a in args], env=env,
                                  stdout=subprocess.PIPE, stderr=self.err, text=True)

    def log(self):
        return Path(self.log_path).read_text()

    def wait_for(self, text, timeout=10.0):
        end = time.time() + timeout
        while time.time() < end:
            if text in self.log():
                return True
            if self.p.poll() is not None:
                return text in self.log()
            time.sleep(0.02)
        return False

    def wait(self, timeout=10.0):
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        if self.p.poll() is None:
            self.p.send_signal(sig)
        rc = self.wait(timeout)
        if rc is None:
            self.p.kill()
            rc = self.p.wait()
        self.err.close()
        return rc


@pytest.fixture
def start(tmp_path, model):
    """start(binary, *args, env={...}, with_model=True, port=None) -> (Proc, port)."""
    procs = []

    def _start(binary, *args, env=None, with_model=True, port=None):
        port = port or free_port()
        argv = []
        if with_model:
            argv += ["-m", model]
        argv += ["--port", port] + list(args)
        e = clean_env(DS4_LOCK_FILE=tmp_path / ("ds4-%d.lock" % len(procs)))
        e.update({k: str(v) for k, v in (env or {}).items()})
        p = Proc(binary, argv, e, tmp_path / ("server-%d.log" % len(procs)))
        procs.append(p)
        return p, port

    yield _start
    for p in procs:
        if p.p.poll() is None:
            p.p.kill()
            p.p.wait()
        if not p.err.closed:
            p.err.close()


def serve(start, binary, *args, **kw):
    p, port = start(binary, *args, **kw)
    assert p.wait_for("ds4-server: listening on http://127.0.0.1:%d" % port), p.log()
    return p, "http://127.0.0.1:%d" % port
