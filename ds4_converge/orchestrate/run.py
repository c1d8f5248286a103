"""A converge run's policy: what it may change, which host facts it plans from, and when it takes the root's lock.

The CLI parses the command line and shows progress; what a run with those options does is decided here.
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from ds4_converge.core.context import Context
from ds4_converge.orchestrate import captured_facts, reconciler
from ds4_converge.orchestrate.reconciler import Outcome, facts_request


class Lock(AbstractContextManager, Protocol):
    """The root's run lock (core.lock.RunLock, or the CLI's wrapper that reports who holds it)."""

    def acquire(self) -> AbstractContextManager: ...


def run(ctx: Context, lock: Lock, *, check: bool, captured: captured_facts.Captured | None = None,
        diff: bool = False) -> Outcome:
    """Converge `ctx` under `lock`.

    check: plan only, nothing on the host may change (the lock is then taken read-only by the caller).
    captured: plan against another host's facts (``--check --facts FILE``); preflight's line says which."""
    ctx.check = check
    if captured is not None:
        ctx.facts, ctx.facts_elsewhere = captured.facts, True
        _say_where_the_facts_came_from(ctx, captured)
    if not check and not ctx.layout.root.exists():
        # a box never converged: take the lock (creating ROOT) only right before the first change,
        # so a run refused by preflight leaves no trace
        ctx.before_change = lock.acquire
        with lock:
            return reconciler.converge(ctx, diff=diff)
    with lock.acquire():
        return reconciler.converge(ctx, diff=diff)


def _say_where_the_facts_came_from(ctx: Context, captured: captured_facts.Captured) -> None:
    """Preflight's line (as it prints) notes which facts the plan used, and warns where they do not fit the spec."""
    try:
        request = facts_request(ctx)
    except Exception:  # noqa: BLE001 - a path that does not expand: preflight itself reports it
        request = {"port": captured.facts.port, "root": captured.facts.root, "model_dirs": []}
    said, warned = captured_facts.notes(captured, request, ctx.spec.server.user)
    shown = ctx.on_role_done

    def on_role_done(result):
        if result.name == "preflight":
            result.notes[:0] = said
            result.warnings[:0] = warned
        shown(result)

    ctx.on_role_done = on_role_done
