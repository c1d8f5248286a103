"""Run the roles in order: plan each, apply exactly what it planned, and revert to last good when a switch fails.

Host facts are gathered once, before the first role. A role is a module with ``NAME`` and a pure
``plan(ctx) -> RolePlan``; applying a plan is running its changes' actions (:func:`~ds4_converge.core.plan.apply`).
"""
from __future__ import annotations

import xmlrpc.client
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ds4_converge.core import interrupts
from ds4_converge.core import plan as plans
from ds4_converge.core.context import Context
from ds4_converge.core.crashpoints import crash_point
from ds4_converge.core.plan import RoleFailed, RolePlan
from ds4_converge.core.role_result import RoleResult
from ds4_converge.engine import role as engine
from ds4_converge.errors import Ds4Error
from ds4_converge.health import role as probe
from ds4_converge.models import role as models
from ds4_converge.models.placement import placements
from ds4_converge.orchestrate import drive
from ds4_converge.preflight import role as preflight
from ds4_converge.preflight.scope import fact_request
from ds4_converge.service import role as service
from ds4_converge.service import switch
from ds4_converge.service.switch import Switch
from ds4_converge.toolchain import role as toolchain

# models before engine: a wrong file or a budget that cannot fit is refused before a build starts
ROLES = (preflight, toolchain, models, engine, service, probe)
# what a failing plan or apply may raise: our own errors, and what talking to the host raises on its own
APPLY_ERRORS = (Ds4Error, xmlrpc.client.Error, OSError)


@dataclass
class Outcome:
    ok: bool
    results: list[RoleResult] = field(default_factory=list)
    reverted: bool = False
    release: str | None = None
    endpoint: str | None = None
    error: str = ""
    detail: str = ""
    exception: BaseException | None = field(default=None, repr=False)  # for --debug; never in the JSON
    repairs: list[str] = field(default_factory=list)  # what this run found broken and mended (said once)
    # this run's switch, held here from the service role's apply to its commit or revert (service/switch.py)
    switch: Switch = field(default_factory=Switch, repr=False)

    @property
    def changed(self) -> bool:
        return any(r.changed for r in self.results)

    def to_json(self) -> dict:
        return {"ok": self.ok, "changed": self.changed, "reverted": self.reverted, "release": self.release,
                "endpoint": self.endpoint, "error": self.error or None, "detail": self.detail or None,
                "roles": [r.to_json() for r in self.results]}


def facts_request(ctx: Context) -> dict:
    """What of the host this spec needs looked at (gather_host_facts' arguments)."""
    files = placements(ctx.spec.model, ctx.host_path, ctx.layout.models)
    return fact_request(ctx.spec, ctx.host_path, ctx.layout, files)


def gather_facts(ctx: Context):
    """The host facts every role reads, gathered once per run (read-only commands: safe in check mode)."""
    from ds4_converge.facts import gather_host_facts

    return gather_host_facts(**facts_request(ctx))


def converge(ctx: Context, *, diff: bool = False, roles: Sequence = ROLES,
             revert: Callable[[Context, Outcome], None] | None = None, sw: Switch | None = None) -> Outcome:
    """`roles`, `revert` and `sw` are seams for tests (fake roles); a run uses the real ones."""
    revert = revert or revert_to_last_good
    sw = sw or Switch()
    damaged = ctx.state.damaged
    if damaged:
        ctx.say(f"warning: {damaged}")
    try:
        if ctx.facts is None:
            ctx.facts = gather_facts(ctx)
    except BaseException as exc:  # noqa: BLE001 - nothing changed yet: a clean failure is enough
        outcome = Outcome(ok=True, switch=sw)
        return _failed(ctx, outcome, roles, revert, roles[0].NAME, _unexpected(exc, outcome), plan=None,
                       diff=diff, done=[])
    repaired = None
    if not ctx.check and ctx.layout.root.exists():
        crash_point("started")
        repaired = switch.recover_stale(ctx)  # a run that died mid-switch, and no guard repaired it
        if repaired:
            ctx.say(repaired)
    outcome = Outcome(ok=True, switch=sw)
    try:
        _run(ctx, outcome, roles, revert, diff)
    except KeyboardInterrupt as exc:
        # Ctrl-C or SIGTERM (interrupts.Interrupted) between two roles or while a line prints (inside a role the
        # role's own net catches it): after the old engine was stopped the box must not be left without one.
        # Nothing learned is written: the run was cut short (and may not even hold the lock yet).
        finished = {r.name for r in outcome.results}
        role = next((r.NAME for r in roles if r.NAME not in finished), roles[-1].NAME)
        why = f"interrupted ({exc})" if str(exc) else "interrupted (SIGINT)"
        return _failed(ctx, outcome, roles, revert, role, RoleFailed(why), plan=None, diff=diff, done=[])
    finally:
        if sw.begun and not ctx.check:
            switch.settle(ctx, sw)  # settled: proven, reverted, or reported as failed with what serves
    outcome.repairs = [r for r in (damaged and f"state: {damaged}", repaired) if r]
    if outcome.results:
        outcome.results[0].warnings[:0] = outcome.repairs
    if damaged and outcome.ok and not ctx.check and ctx.state.damaged:  # nothing saved it: record what was rebuilt
        ctx.before_change()
        ctx.state.save(ctx.layout.state_file)
    ctx.remember_learned()  # not after an exception: another run's lock, say, means this one may write nothing
    return outcome


def _run(ctx: Context, outcome: Outcome, roles: Sequence, revert, diff: bool) -> Outcome:
    for role in roles:
        ctx.on_role_start(role.NAME)
        changes, messages, plan = [], [], None
        while True:
            try:
                plan = _plan(role, ctx, outcome.switch)
            except Ds4Error as exc:
                return _failed(ctx, outcome, roles, revert, role.NAME, exc, plan=None, diff=diff, done=changes)
            except BaseException as exc:  # noqa: BLE001 - a plan changes nothing: a clean failure is enough
                return _failed(ctx, outcome, roles, revert, role.NAME, _unexpected(exc, outcome), plan=None,
                               diff=diff, done=changes)
            if plan.errors:
                message = "; ".join(str(f) for f in plan.errors)
                return _failed(ctx, outcome, roles, revert, role.NAME, RoleFailed(message), plan=plan, diff=diff,
                               done=changes)
            if ctx.check or not plan.changes:
                break
            try:
                ctx.before_change()
            except Exception as exc:
                if not outcome.changed:
                    raise  # nothing was done yet: the caller's own refusal (a held lock, an untrusted root)
                # a refusal after a role changed something (a release built): the report lists what was done
                return _failed(ctx, outcome, roles, revert, role.NAME, RoleFailed(getattr(exc, "message", str(exc))),
                               plan=None, diff=diff, done=changes)
            try:
                messages.append(_apply(ctx, plan, outcome.switch))
            except Ds4Error as exc:
                return _failed(ctx, outcome, roles, revert, role.NAME, exc, plan=plan, diff=diff, done=changes)
            except BaseException as exc:  # noqa: BLE001
                # whatever it is (a bug, OSError, Ctrl-C, SIGTERM), once the old engine was stopped the box must
                # not be left without one: revert first, then report
                return _failed(ctx, outcome, roles, revert, role.NAME, _unexpected(exc, outcome), plan=plan,
                               diff=diff, done=changes)
            changes += plan.changes
            if not plan.replan:
                break
        _record(ctx, outcome, _result(plan, diff, ctx.check, changes, messages))
    outcome.release = ctx.desired.release if ctx.desired else (ctx.build.release_id if ctx.build else None)
    outcome.endpoint = outcome.switch.endpoint(ctx)
    return outcome


def _plan(role, ctx: Context, sw: Switch) -> RolePlan:
    """Each role plans from the Context; the service role is handed this run's switch to begin, the probe the
    engine under probe (the candidate beside the serving one, or what the switch started)."""
    if role is service:
        return service.plan(ctx, sw)
    if role is probe:
        return probe.plan(ctx, sw.under_probe(ctx))
    return role.plan(ctx)


def _apply(ctx: Context, plan: RolePlan, sw: Switch) -> str:
    """Exactly the plan; a road the service role's apply chose is run step by step (orchestrate/drive.py) up to
    the probe, and once a role handed a verdict (the probe: the switched engine is healthy) the rest of it."""
    said = [plans.apply(ctx, plan)]
    if sw.road is not None and not sw.begun:
        said.append(drive.begin(ctx, sw))
    if sw.verdict is not None:
        said.append(drive.commit(ctx, sw))
    return "; ".join(filter(None, said))


def _record(ctx: Context, outcome: Outcome, result: RoleResult) -> None:
    outcome.results.append(result)
    ctx.on_role_done(result)  # people see each role's line as it finishes, not all at the end


def _result(plan: RolePlan, diff: bool, check: bool, applied: list, messages: list[str]) -> RoleResult:
    """An applied role reports what it did (a replanned role: every part); otherwise its plan (or --check's)."""
    if applied:
        # a replanned role whose last plan was empty ends with its reason ("release … is built")
        msg = "; ".join(m for m in [*messages, "" if plan.changes else plan.reason] if m)
        status = "changed" if any(c.counts for c in applied) else "ok"
        return RoleResult(plan.role, status, msg, _diff(applied) if diff else "", [c.what for c in applied],
                          plan.warnings, plan.notes)
    status = "changed" if plan.changed else "ok"
    msg = plan.reason if not check or not plan.changed else f"would {plan.reason}"
    return RoleResult(plan.role, status, msg, plan.diff() if diff else "", [c.what for c in plan.changes],
                      plan.warnings, plan.notes)


def _diff(changes: list) -> str:
    return "".join(c.unified_diff() for c in changes)


def _failed(ctx: Context, outcome: Outcome, roles: Sequence, revert, role: str, exc: BaseException, *,
            plan: RolePlan | None, diff: bool, done: list) -> Outcome:
    with interrupts.shielded():  # a signal now must not cut the report or the revert short
        return _fail_and_revert(ctx, outcome, roles, revert, role, exc, plan, diff, done)


def _fail_and_revert(ctx: Context, outcome: Outcome, roles: Sequence, revert, role: str, exc: BaseException,
                     plan: RolePlan | None, diff: bool, done: list) -> Outcome:
    outcome.ok = False
    outcome.error = f"{role}: {exc}"
    outcome.detail = getattr(exc, "detail", "")
    changes = done + (list(plan.changes) if plan else [])
    _record(ctx, outcome, RoleResult(role, "failed", str(exc), _diff(changes) if diff else "",
                                     [c.what for c in changes],
                                     plan.warnings if plan else [], plan.notes if plan else []))
    finished = {r.name for r in outcome.results}
    for skipped in [r.NAME for r in roles if r.NAME not in finished]:
        _record(ctx, outcome, RoleResult(skipped, "skipped", f"not run: {role} failed"))
    if outcome.switch.begun and not ctx.check:
        try:
            revert(ctx, outcome)
        except BaseException as exc:  # noqa: BLE001 - the revert is guarded: say what failed and what serves
            outcome.exception = outcome.exception or exc
            reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
            outcome.error += f"; the revert failed too ({reason}); serving now: {switch.serving(ctx)}"
    current = ctx.state.current
    outcome.release = current.release if current else None
    outcome.endpoint = current.endpoint if current else None
    return outcome


def _unexpected(exc: BaseException, outcome: Outcome) -> RoleFailed:
    """A clean one-line failure for any exception; the exception itself is kept for --debug and the log."""
    outcome.exception = exc
    if isinstance(exc, KeyboardInterrupt):  # interrupts.Interrupted names its signal: SIGINT or SIGTERM
        return RoleFailed(f"interrupted ({exc})" if str(exc) else "interrupted (SIGINT)")
    if isinstance(exc, SystemExit):
        return RoleFailed(f"interrupted (exit {exc.code})")
    if isinstance(exc, (OSError, xmlrpc.client.Error)):
        return RoleFailed(str(exc) or type(exc).__name__)
    return RoleFailed(f"unexpected {type(exc).__name__}: {exc}")


def revert_to_last_good(ctx: Context, outcome: Outcome) -> None:
    """The service puts last good back (one operation, guarded); the probe proves it is healthy again."""
    from ds4_converge.health.probe import Unhealthy, wait_healthy

    last_good = ctx.state.last_good
    try:
        reverted = switch.revert(ctx, outcome.switch)
        if reverted.road is None:
            outcome.error += f"; {reverted.note}"
            return
        drive.run(ctx, outcome.switch, reverted.road.before_probe())
        # last good passed its soak already: prove it answers, don't make the outage longer
        engine = outcome.switch.under_probe(ctx)
        wait_healthy(probe.target(ctx, engine), engine.watch(), soak=False)
    except (*APPLY_ERRORS, Unhealthy) as exc:
        target = last_good.release if last_good else "a stopped engine"
        outcome.error += f"; revert to {target} failed too: {exc}; serving now: {switch.serving(ctx)}"
        return
    outcome.reverted = True
    outcome.error += f"; reverted to {last_good.release}"
