"""What a role would change. `changed` is derived from the plan, never set by hand (what it did: role_result.py).

The contract between plan and apply: a role's `plan(ctx)` only reads (the spec, the facts, files, supervisord,
git refs) and returns its changes; each Change carries its `action`, bound at plan time to everything the plan
decided (the rendered text, the file to remove, the build request). Applying a role is running exactly those
actions, in order (:func:`apply`): nothing is rendered, stat'ed or decided again on the way.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ds4_converge.errors import Ds4Error

if TYPE_CHECKING:
    from ds4_converge.core.context import Context


@dataclass(frozen=True)
class Change:
    """One concrete change: what, and its before/after (text for files and command lines)."""

    what: str
    before: str | None = None
    after: str | None = None
    restarts: bool = False  # applying it means the engine is restarted
    # False for a refresh a run must do before it can tell what to change (engine.prepare): applied like any
    # change, but it alone does not make the role "changed"
    counts: bool = True
    # what applying it does, with everything the plan decided bound in; returns a few words for the report.
    # None only for a change that --check shows but a real run never plans (e.g. before a build exists).
    action: Callable[[Context], str | None] | None = field(default=None, compare=False, repr=False)

    def apply(self, ctx: Context) -> str:
        if self.action is None:
            raise RoleFailed(f"{self.what}: this change was planned for display only and cannot be applied")
        return self.action(ctx) or ""

    def unified_diff(self) -> str:
        if self.before is None and self.after is None:
            return ""
        import difflib  # only for --diff and failures

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
    # plan this role again once these changes are applied: they change what the plan reads (engine.prepare
    # refreshes the engine source that the version is resolved from)
    replan: bool = False

    @property
    def changed(self) -> bool:
        return any(c.counts for c in self.changes)

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


def apply(ctx: Context, plan: RolePlan) -> str:
    """Apply exactly the plan: each change's action, in the plan's order, and nothing else."""
    return "; ".join(filter(None, (change.apply(ctx) for change in plan.changes)))


class RoleFailed(Ds4Error):
    """A role could not reach its goal; the message is for people, `detail` is e.g. a log tail."""
