"""What runs now and what last passed the whole probe ("last good"), persisted under root."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
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

    def stamped(self) -> Deployment:
        return Deployment(**{**asdict(self), "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})

    def same_config(self, other: Deployment | None) -> bool:
        return other is not None and other.program_conf == self.program_conf


HISTORY = 5


@dataclass
class State:
    current: Deployment | None = None
    good: list[Deployment] = field(default_factory=list)  # oldest first; the last one is "last good"

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
        if not path.exists():
            return cls()
        data = json.loads(path.read_text())
        current = Deployment(**data["current"]) if data.get("current") else None
        return cls(current=current, good=[Deployment(**d) for d in data.get("good", [])])

    def save(self, path: Path) -> None:
        data = {"current": asdict(self.current) if self.current else None,
                "good": [asdict(d) for d in self.good]}
        write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")

    def releases_in_use(self) -> set[str]:
        """Releases that must never be pruned: what runs, last good, and where rollback would go."""
        return {d.release for d in (self.current, self.last_good, self.previous_good) if d}
