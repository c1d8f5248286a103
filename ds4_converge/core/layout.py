"""Where everything lives under paths.root."""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

LAST_RUN = "last-run.json"  # under ROOT/logs


@dataclass(frozen=True)
class Layout:
    root: Path

    @property
    def releases(self) -> Path:
        return self.root / "releases"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def engine_cache(self) -> Path:
        return self.cache / "engine.git"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def run(self) -> Path:
        """0700: holds supervisord's unix socket, which grants control of the engine."""
        return self.root / "run"

    @property
    def supervisor(self) -> Path:
        return self.root / "supervisor"

    @property
    def front_config(self) -> Path:
        """The front door's haproxy.cfg (service/front.py): HAProxy runs with `-f` this file, which is how a
        front door that outlived its supervisord is known as ours."""
        return self.root / "front" / "haproxy.cfg"

    @property
    def supervisord_conf(self) -> Path:
        return self.supervisor / "supervisord.conf"

    @property
    def program_dir(self) -> Path:
        return self.supervisor / "programs"

    def program_conf(self, name: str) -> Path:
        return self.program_dir / f"{name}.conf"

    @property
    def socket(self) -> Path:
        return self.run / "supervisor.sock"

    @property
    def supervisord_pid(self) -> Path:
        return self.run / "supervisord.pid"

    @property
    def last_run_file(self) -> Path:
        """The outcome of the last converge or rollback (cli/session.py), or of a run that died mid-switch (the
        switch guard records what it restored)."""
        return self.logs / LAST_RUN

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def lock_file(self) -> Path:
        return self.root / "converge.lock"

    @property
    def locks(self) -> Path:
        """0755: the engines' lock files, which an engine running as server.user must be able to open."""
        return self.root / "locks"

    def engine_lock(self, name: str) -> Path:
        """DS4_LOCK_FILE per instance: the default /tmp/ds4.lock would collide between instances. Not in run/
        (0700, root's): ds4 opens it O_RDWR|O_CREAT as the user it runs as and exits 2 when it cannot."""
        return self.locks / f"{name}.ds4.lock"

    @property
    def supervisord_log(self) -> Path:
        return self.logs / "supervisord.log"

    def engine_log(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def build_log(self, release_id: str) -> Path:
        return self.logs / f"build-{release_id}.log"

    @property
    def bench_results(self) -> Path:
        """One JSON line per bench run (bench, tune, performance gate), keyed by release and config."""
        return self.root / "bench" / "results.jsonl"

    def ensure(self) -> None:
        for d in (self.root, self.releases, self.cache, self.logs, self.supervisor, self.program_dir, self.locks):
            d.mkdir(mode=0o755, parents=True, exist_ok=True)
        self.run.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.run, 0o700)


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Write a temp file beside the target and rename it over: readers never see half a file. The temp file is
    made new (never opened through a link left in its place) with its final mode, so a secret is never readable
    by others, not even for a moment; the rename replaces a link at `path` rather than writing through it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(tmp, flags, mode)
    except FileExistsError:  # left by a run of the same PID that was killed
        os.unlink(tmp)
        fd = os.open(tmp, flags, mode)
    try:
        with os.fdopen(fd, "w") as handle:
            os.fchmod(handle.fileno(), mode)  # the umask may have taken bits a reader needs
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
