"""Helpers for end-to-end tests: a simulated box (root + spec + the real CLI), free ports, engine PIDs."""
from __future__ import annotations

import contextlib
import copy
import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

from ds4_converge.core import processes

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "engine" / "models" / "tiny-ds4flash.gguf"


def report_document(proc: subprocess.CompletedProcess) -> dict:
    """The one JSON document a --json run prints, checked against the report's JSON Schema and its exit code."""
    import jsonschema

    from ds4_converge.cli.report import schema

    try:
        document = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"not one JSON document (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}") from None
    jsonschema.validate(document, schema(), cls=jsonschema.Draft202012Validator)
    assert document["exit_code"] == proc.returncode, (document, proc.stderr)
    return document


# the smallest valid spec: what spec tests add to, or break, one field at a time
MINIMAL_SPEC = """\
engine:
  repo: https://example.invalid/ds4.git
  ref: v0.2.0
  target: cpu
model:
  main: /srv/gguf/model.gguf
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def two_free_ports() -> int:
    """A port P with P + 1 free too: the engine's two slots. Below the ephemeral range (32768-60999 here), as
    server.port is on a real box: the client's and HAProxy's own connections take ephemeral ports as their source,
    and an engine that starts on such a port finds it in use."""
    for _ in range(200):
        port = random.randrange(20000, 32000)
        try:
            for candidate in (port, port + 1):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        return port
    raise AssertionError("no two free consecutive ports")


class Box:
    """One simulated DGX Spark: a root dir, a spec file, and the CLI."""

    def __init__(self, root: Path, repo: Path, port: int):
        self.root, self.repo, self.port = root, repo, port
        self.spec_path = root.parent / f"{root.name}-spec.yaml"
        self.inside: list[str] = []  # a prefix that runs the CLI in a mount namespace (Disk.inside)
        self.spec = {
            "engine": {"repo": str(repo), "ref": "v0.2.0", "target": "cpu", "jobs": 2},
            "model": {"main": str(MODEL)},
            "server": {"port": port, "ctx": 32768, "env": {"DS4_SIM_LOAD_SECONDS": "0.3"}, "stop_wait_s": 20},
            "health": {"deadline_s": 15, "soak_s": 1.5, "interval_s": 0.2},
            "paths": {"root": str(root)},
        }
        self.write()

    @contextlib.contextmanager
    def edited(self, changes: dict):
        """Apply {"engine.ref": "v0.3.0", ...} to the spec file for the block, then restore it (shared boxes)."""
        saved = copy.deepcopy(self.spec)
        for dotted, value in changes.items():
            *parents, key = dotted.split(".")
            node = self.spec
            for part in parents:
                node = node.setdefault(part, {})
            node[key] = value
        self.write()
        try:
            yield self
        finally:
            self.spec = saved
            self.write()

    def write(self) -> Path:
        self.spec_path.write_text(yaml.safe_dump(self.spec))
        return self.spec_path

    @property
    def user_cache(self) -> Path:
        """XDG_CACHE_HOME of this box's CLI runs: its own no-op receipts, not ~/.cache's."""
        return self.root.parent / f"{self.root.name}-user-cache"

    def cli(self, *args: str, timeout: float = 180, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([*self.inside, sys.executable, "-m", "ds4_converge.cli", *args], capture_output=True,
                              text=True, timeout=timeout, env={**os.environ, "NO_COLOR": "1",
                                                    "XDG_CACHE_HOME": str(self.user_cache), **(env or {})})

    def converge(self, *extra: str, env: dict | None = None) -> tuple[int, dict]:
        proc = self.cli(str(self.spec_path), "--json", *extra, env=env)
        return proc.returncode, report_document(proc)

    def converge_holding_the_lock(self) -> subprocess.Popen:
        """`ds4-converge SPEC --json` in the background, its engine loading for 4 s, returned once it holds this
        root's lock (or 30 s passed): what a second run meets. The caller waits for it."""
        self.spec["server"]["env"]["DS4_SIM_LOAD_SECONDS"] = "4"
        self.write()
        first = subprocess.Popen([sys.executable, "-m", "ds4_converge.cli", str(self.spec_path), "--json"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lock = self.root / "converge.lock"
        deadline = time.monotonic() + 30
        while not (lock.exists() and lock.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        return first

    def json(self, *args: str) -> tuple[int, dict]:
        """Any command with --json: (exit code, its schema-checked document)."""
        proc = self.cli(*args, "--json")
        return proc.returncode, report_document(proc)

    def status(self) -> dict:
        return self.json("status", str(self.spec_path))[1]

    def stop(self) -> None:
        self.cli("stop", str(self.spec_path))

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def tree(self) -> dict[str, tuple[int, int]]:
        """Every file under root with (size, mtime_ns): proof that nothing was written."""
        return {str(p.relative_to(self.root)): (p.stat().st_size, p.stat().st_mtime_ns)
                for p in sorted(self.root.rglob("*")) if p.is_file()} if self.root.exists() else {}


@contextlib.contextmanager
def reachable_box(repo: Path):
    """A box in a folder every user may enter (pytest's own tmp folder is 0700): for what runs as another user
    (nobody builds the engine, a plain user runs the CLI). Stopped and removed after the block."""
    import shutil
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="ds4c-reachable-"))
    where.chmod(0o755)
    box = Box(where / "root", repo, free_port())
    try:
        yield box
    finally:
        box.stop()
        shutil.rmtree(where, ignore_errors=True)


FRONT_KEY = "sk-test-front-0123456789"


def sim_variant(sim_repo: Path, clone: Path, makefile_tail: str, tag: str) -> str:
    """A clone of the simulated engine whose v0.2.0 Makefile ends with `makefile_tail`, committed and tagged `tag`:
    a release that does something a release must not."""
    git = ["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "clone", "-q", str(sim_repo), str(clone)], check=True)
    subprocess.run([*git, "checkout", "-q", "v0.2.0"], check=True)
    with open(clone / "Makefile", "a") as handle:
        handle.write(makefile_tail)
    subprocess.run([*git, "commit", "-qam", tag], check=True)
    subprocess.run([*git, "tag", tag], check=True)
    return str(clone)


def with_front(box: Box) -> Box:
    """`box` behind a front door (spec `front`) on free ports, with a key file (0600) beside its root."""
    taken = {box.port, box.port + 1}
    while len(taken) < 4:  # two free ports in a row may be the same one: four distinct listeners, or the spec is invalid
        taken.add(free_port())
    box.front_port, box.metrics_port = sorted(taken - {box.port, box.port + 1})
    keys = box.root.parent / f"{box.root.name}-keys"
    keys.write_text(f"# keys of the test endpoint\n{FRONT_KEY}\n")
    os.chmod(keys, 0o600)
    box.spec["front"] = {"host": "127.0.0.1", "port": box.front_port, "hold_s": 30, "keys": str(keys),
                         "metrics": {"host": "127.0.0.1", "port": box.metrics_port}}
    box.write()
    return box


def engine_pids(root: Path) -> set[int]:
    """ds4-server processes running a release under `root` (other tests may run engines too)."""
    return {p.pid for p in processes.every()
            if any(b"ds4-server" in arg for arg in processes.cmdline(p.pid))
            and str(root).encode() in b"\0".join(processes.cmdline(p.pid))}


# A real tmpfs for the tests of a disk that fills or is read-only: root mounts it where everyone sees it; a plain
# user mounts it in a mount namespace of its own (a user namespace that maps the user to itself: the tool runs as
# that user, not as root) and runs the CLI in there (Disk.inside). Where neither can be, the test skips, saying why.


class Disk:
    """A mounted tmpfs; `inside` is the prefix that runs a command where it is mounted (empty: everywhere)."""

    def __init__(self, path: Path, inside: list[str]):
        self.path, self.inside = path, inside

    def entries(self) -> list[str]:
        """What is on the tmpfs itself, as the processes that use it see it."""
        if not self.inside:
            return sorted(os.listdir(self.path))
        code = "import os, sys; print(*sorted(os.listdir(sys.argv[1])), sep=chr(10))"
        listed = subprocess.run([*self.inside, sys.executable, "-c", code, str(self.path)], capture_output=True,
                                text=True, check=True)
        return listed.stdout.split()


@contextlib.contextmanager
def tmpfs(path: Path, size: str, *options: str):
    """A real tmpfs of `size` mounted at path (made here) while the block runs."""
    import pytest

    path.mkdir()
    flags = ",".join([f"size={size}", "mode=0755", *options])
    if os.geteuid() == 0:
        mount = subprocess.run(["mount", "-t", "tmpfs", "-o", flags, "tmpfs", str(path)], capture_output=True,
                               text=True)
        if mount.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {mount.stderr.strip()}")
        try:
            yield Disk(path, [])
        finally:
            subprocess.run(["umount", "-l", str(path)], check=False)
        return
    # the holder: mounts it (the capabilities a user has in a namespace of its own), then waits; commands join it
    holder = subprocess.Popen(["unshare", "--map-current-user", "--keep-caps", "--mount", "--propagation", "private",
                               "sh", "-c", 'mount -t tmpfs -o "$1" tmpfs "$2" && echo mounted && exec sleep 3600',
                               "sh", flags, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if holder.stdout.readline().strip() != "mounted":
            holder.wait(timeout=10)
            pytest.skip(f"cannot mount a tmpfs in a user namespace here: {holder.stderr.read().strip()}")
        yield Disk(path, ["nsenter", f"--target={holder.pid}", "--user", "--mount", "--preserve-credentials", "--"])
    finally:
        holder.kill()
        holder.wait()
