"""What runs now and what last passed the whole probe ("last good"), persisted under root."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .layout import write_atomic


@dataclass(frozen=True)
class Deployment:
    """Everything needed to start a release again exactly as it ran: no rebuild, no re-render from a spec."""

    release: str
    program_conf: str
    command: list[str]
    endpoint: str
    model_files: list[str] = field(default_factory=list)
    recorded_at: str = ""

    def stamped(self) -> Deployment:
        return Deployment(**{**asdict(self), "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})

    def same_config(self, other: Deployment | None) -> bool:
        return other is not None and other.program_conf == self.program_conf


@dataclass
class State:
    current: Deployment | None = None
    last_good: Deployment | None = None

    @classmethod
    def load(cls, path: Path) -> State:
        if not path.exists():
            return cls()
        data = json.loads(path.read_text())
        return cls(**{k: Deployment(**v) if v else None for k, v in data.items() if k in ("current", "last_good")})

    def save(self, path: Path) -> None:
        data = {"current": asdict(self.current) if self.current else None,
                "last_good": asdict(self.last_good) if self.last_good else None}
        write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")

    def releases_in_use(self) -> set[str]:
        return {d.release for d in (self.current, self.last_good) if d}
