"""Fixtures for the simulated ds4 engine: a sim repo, real `make cpu` builds from
clones of it, and a helper that runs ds4-server as a real process."""

import itertools

import pytest

from engine_sim_support import MODELS, PYTHON, Proc, clean_env, free_port, run

import make_sim_repo  # noqa: E402  (engine/ is put on sys.path by engine_sim_support)


@pytest.fixture(scope="session")
def sim_repo(tmp_path_factory):
    dest = tmp_path_factory.mktemp("simrepo") / "ds4"
    tags = make_sim_repo.build(dest)
    return dest, tags


class Builds:
    """The session's builds of the sim repo's tags, each made once and shared by every test of the session."""

    def __init__(self, repo, root):
        self.repo = repo
        self.root = root
        self.cache = {}
        self._clones = itertools.count()

    def clone(self, tag, dest=None):
        """A clone of `tag` in a folder of its own (`dest`, or a new one under root): never the folder of a build
        that a session-wide fixture (upstream, fork) hands out."""
        d = dest or self.root / f"src-{tag}-{next(self._clones)}"
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
