"""The real ds4 engine (upstream antirez/ds4), built from its source tarballs for the conformance tests.

Two upstream versions are tested: 8d57664 and b030961 (`VERSIONS`). Their tarballs are in the repository,
engine/upstream/antirez-ds4-<commit>.tar.gz (MIT: their LICENSE and SHA256SUMS beside them), so every clone runs
these tests; DS4_ENGINE_DIR names another folder, and DS4_ENGINE_TARBALL still overrides the 8d57664 one. `make cpu` runs once per tarball: the tree is cached under
build/ds4-engine/<sha256>/ (DS4_ENGINE_CACHE names another folder, e.g. one shared by several worktrees) and
reused by later sessions, so only the first session on a machine pays for the compile.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARBALL_ENV = "DS4_ENGINE_TARBALL"
VERSIONS = ("8d57664", "b030961")
UPSTREAM = REPO / "engine" / "upstream"
ENGINES = Path(os.environ.get("DS4_ENGINE_DIR") or UPSTREAM)
DEFAULT_TARBALL = ENGINES / "antirez-ds4-8d57664.tar.gz"
CACHE = Path(os.environ.get("DS4_ENGINE_CACHE") or REPO / "build" / "ds4-engine")
BINARIES = ("ds4", "ds4-server")


def tarball(version: str = "8d57664") -> Path | None:
    """The source tarball of an upstream version, or None where it is not provided."""
    if version not in VERSIONS:
        raise ValueError(f"unknown upstream version {version!r}; known: {VERSIONS}")
    override = os.environ.get(TARBALL_ENV) if version == "8d57664" else None
    path = Path(override or ENGINES / f"antirez-ds4-{version}.tar.gz")
    return path if path.is_file() else None


def require(version: str) -> Path:
    """The tarball of an upstream version; its absence is an error that says where it was looked for (a clone
    always has both, so a test that needs one fails rather than skips)."""
    found = tarball(version)
    if found is None:
        raise FileNotFoundError(f"no engine tarball for upstream {version} in {ENGINES} (the repository's "
                                f"{UPSTREAM.relative_to(REPO)} holds both; DS4_ENGINE_DIR or {TARBALL_ENV} points "
                                f"elsewhere)")
    return found


def built(version: str, cache: Path | None = None) -> "RealEngine":
    """An upstream version built with `make cpu` (cached: see build)."""
    return build(require(version), cache or CACHE, version)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def unpack(archive: Path, dest: Path) -> Path:
    """The tarball's single top-level directory, extracted to dest (which must not exist)."""
    dest.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        # extraction filters exist from Python 3.11.4 on (Debian 12 ships 3.11.2, README's floor is 3.11); the
        # tarballs are the repository's own, checked against SHA256SUMS, so older 3.11s extract without one
        tar.extractall(dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    (top,) = [p for p in dest.iterdir()]
    return top


@dataclass(frozen=True)
class RealEngine:
    """A built upstream tree: sources and binaries side by side, as `make cpu` leaves them."""

    tree: Path
    tarball: Path
    digest: str
    version: str = "8d57664"

    @property
    def server(self) -> Path:
        return self.tree / "ds4-server"

    @property
    def cli(self) -> Path:
        return self.tree / "ds4"

    def source(self, name: str) -> str:
        return (self.tree / name).read_text(encoding="utf-8", errors="replace")

    def run_server(self, *args, lock: Path, timeout: float = 30, env: dict | None = None
                   ) -> subprocess.CompletedProcess:
        """ds4-server with its own lock file (the default /tmp/ds4.lock is shared by everyone on the host)."""
        return subprocess.run([str(self.server), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(env or {}), "DS4_LOCK_FILE": str(lock)})


def build(archive: Path, cache: Path = CACHE, version: str = "8d57664") -> RealEngine:
    """`make cpu` of the tarball's tree, once per tarball content (a file lock serialises parallel sessions)."""
    digest = sha256(archive)
    home = cache / digest
    done = home / "tree"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not all((done / b).exists() for b in BINARIES):
            partial = cache / f".{digest}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            top = unpack(archive, partial)
            log = partial / "make.log"
            with open(log, "wb") as out:
                proc = subprocess.run(["make", f"-j{os.cpu_count() or 1}", "cpu"], cwd=top, stdout=out,
                                      stderr=subprocess.STDOUT)
            if proc.returncode:
                raise RuntimeError(f"make cpu of {archive} failed ({proc.returncode}):\n{log.read_text()[-3000:]}")
            shutil.rmtree(home, ignore_errors=True)
            home.mkdir()
            os.replace(top, done)
            os.replace(log, home / "make.log")
            shutil.rmtree(partial)
    return RealEngine(done, archive, digest, version)


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 10) -> int:
    """Signal a process we started and wait for it; SIGKILL if it will not go."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def wait_for(predicate, timeout: float = 10, interval: float = 0.02) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
