"""What a role would change, and what it did. `changed` is derived from the plan, never set by hand."""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Literal

Status = Literal["ok", "changed", "failed", "skipped"]


@dataclass(frozen=True)
class Change:
    """One concrete change: what, and its before/after (text for files and command lines)."""

    what: str
    before: str | None = None
    after: str | None = None
    restarts: bool = False  # applying it means the engine is restarted

    def unified_diff(self) -> str:
        if self.before is None and self.after is None:
            return ""
        before = (self.before or "").splitlines(keepends=True)
        after = (self.after or "").splitlines(keepends=True)
        lines = difflib.unified_diff(before, after, fromfile=f"before: {self.what}", tofile=f"after: {self.what}")
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


@dataclass
class Finding:
    """A preflight observation: an error stops the run before anything changes."""

    level: Literal["error", "warning", "info"]
    message: str
    fix: str = ""

    def __str__(self) -> str:
        return self.message + (f" (fix: {self.fix})" if self.fix else "")


@dataclass
class RolePlan:
    role: str
    changes: list[Change] = field(default_factory=list)
    reason: str = ""  # one line: why nothing is needed, or a summary of what will happen
    findings: list[Finding] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.changes)

    @property
    def errors(self) -> list[Finding]:
        return self._level("error")

    @property
    def warnings(self) -> list[str]:
        return [str(f) for f in self._level("warning")]

    @property
    def notes(self) -> list[str]:
        return [str(f) for f in self._level("info")]

    def _level(self, level: str) -> list[Finding]:
        return [f for f in self.findings if f.level == level]

    def diff(self) -> str:
        return "".join(c.unified_diff() for c in self.changes)


@dataclass
class RoleResult:
    name: str
    status: Status
    msg: str
    diff: str = ""
    changes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.status == "changed"

    def to_json(self) -> dict:
        return {"name": self.name, "status": self.status, "changed": self.changed, "msg": self.msg,
                "diff": self.diff, "changes": self.changes, "warnings": self.warnings, "notes": self.notes}


class RoleFailed(Exception):
    """A role could not reach its goal; the message is for people, `detail` is e.g. a log tail."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail
