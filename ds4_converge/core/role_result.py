"""What a role did, as the report says it: its status, message, diff and changes. `changed` is derived from the
status, never set by hand."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Status = Literal["ok", "changed", "failed", "skipped"]


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
