"""What runs now and what last passed the whole probe ("last good"), persisted under root."""
from __future__ import annotations

import errno
import json
import os
import stat
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path

from ds4_converge.core.layout import write_atomic


@dataclass(frozen=True)
class Deployment:
    """Everything needed to start a release again exactly as it ran: no rebuild, no re-render from a spec."""

    release: str
    program_conf: str
    command: list[str]
    endpoint: str
    model_files: list[str] = field(default_factory=list)
    recorded_at: str = ""
    bench: dict | None = None  # what the performance gate measured when it passed ({"decode_tps": ...})
    load_s: float | None = None  # from its start to its smoke answered, when it passed (the held road's wait)

    def stamped(self) -> Deployment:
        return Deployment(**{**asdict(self), "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})

    def same_config(self, other: Deployment | None) -> bool:
        return other is not None and other.program_conf == self.program_conf


HISTORY = 5
# state.json holds a few program files' text: far below this. A larger file is damaged (or not ours).
MAX_STATE_BYTES = 1 << 20


def _deployment(data) -> Deployment:
    """A Deployment from JSON, refusing anything of the wrong shape (a torn or hand-edited file)."""
    if not isinstance(data, dict) or set(data) - {f.name for f in fields(Deployment)}:
        raise ValueError(f"not a deployment: {str(data)[:80]}")
    deployment = Deployment(**data)
    if not (isinstance(deployment.release, str) and isinstance(deployment.program_conf, str)
            and isinstance(deployment.endpoint, str) and isinstance(deployment.recorded_at, str)
            and isinstance(deployment.command, list) and all(isinstance(a, str) for a in deployment.command)
            and isinstance(deployment.model_files, list)
            and all(isinstance(f, str) for f in deployment.model_files)):
        raise ValueError(f"a deployment with fields of the wrong type: {deployment.release!r}")
    return deployment


class StateUnreadable(Exception):
    pass


def read_bounded(path: Path) -> bytes:
    """The bytes of a regular file of at most MAX_STATE_BYTES, opened without following a link or blocking."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError("a symbolic link, never followed") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if st.st_size > MAX_STATE_BYTES:
            raise ValueError(f"{st.st_size} bytes, more than the {MAX_STATE_BYTES} a state file may hold")
        data = os.read(fd, MAX_STATE_BYTES + 1)
        if len(data) > MAX_STATE_BYTES:
            raise ValueError(f"more than the {MAX_STATE_BYTES} bytes a state file may hold")
        return data
    finally:
        os.close(fd)


@dataclass
class State:
    current: Deployment | None = None
    good: list[Deployment] = field(default_factory=list)  # oldest first; the last one is "last good"
    # why state.json could not be read; the file is set aside (renamed, never deleted) on the next save
    damaged: str | None = field(default=None, compare=False)

    @property
    def last_good(self) -> Deployment | None:
        return self.good[-1] if self.good else None

    @property
    def previous_good(self) -> Deployment | None:
        """The good deployment before last good with another config: where `rollback` goes from last good."""
        last = self.last_good
        return next((d for d in reversed(self.good[:-1]) if not d.same_config(last)), None)

    def bless(self, deployment: Deployment) -> None:
        """Record a deployment that passed the whole probe, soak included."""
        self.good = [d for d in self.good if not d.same_config(deployment)][-(HISTORY - 1):] + [deployment]
        self.current = deployment

    @classmethod
    def load(cls, path: Path) -> State:
        """The recorded state; raises StateUnreadable for a torn, corrupt or unreadable file, and for anything
        that is not a small regular file (a link, a FIFO, a device, a folder): read with bounds, never blocking."""
        if not os.path.lexists(path):
            return cls()
        try:
            data = json.loads(read_bounded(path))
            if not isinstance(data, dict) or not isinstance(data.get("good", []), list):
                raise ValueError("not a state document")
            current = _deployment(data["current"]) if data.get("current") else None
            return cls(current=current, good=[_deployment(d) for d in data.get("good", [])])
        except (OSError, ValueError, TypeError, RecursionError) as exc:  # UnicodeDecodeError, JSONDecodeError …
            raise StateUnreadable(f"{path} cannot be read ({type(exc).__name__}: {str(exc)[:200]})") from None

    def save(self, path: Path) -> None:
        if self.damaged and os.path.lexists(path):
            stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
            os.replace(path, path.with_name(f"{path.name}.damaged-{stamp}"))  # kept for whoever investigates
        self.damaged = None
        data = {"current": asdict(self.current) if self.current else None,
                "good": [asdict(d) for d in self.good]}
        write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")

    def releases_in_use(self) -> set[str]:
        """Releases that must never be pruned: what runs, last good, and where rollback would go."""
        return {d.release for d in (self.current, self.last_good, self.previous_good) if d}
