"""Run the roles in order: plan each, apply what differs, and revert to last good when a switch fails."""
from __future__ import annotations

import xmlrpc.client
from dataclasses import dataclass, field

from ds4_converge.core.context import Context
from ds4_converge.spec.hostpaths import UnknownVariable
from ds4_converge.core.plan import RoleFailed, RolePlan, RoleResult
from ds4_converge.health.probe import Unhealthy, wait_healthy
from ds4_converge.engine import role as engine
from ds4_converge.models import role as models
from ds4_converge.preflight import role as preflight
from ds4_converge.health import role as probe
from ds4_converge.service import role as service
from ds4_converge.toolchain import role as toolchain
from ds4_converge.service.supervisor import SupervisorError

# models before engine: a wrong file or a budget that cannot fit is refused before a build starts
ROLES = (preflight, toolchain, models, engine, service, probe)


@dataclass
class Outcome:
    ok: bool
    results: list[RoleResult] = field(default_factory=list)
    reverted: bool = False
    release: str | None = None
    endpoint: str | None = None
    error: str = ""
    detail: str = ""

    @property
    def changed(self) -> bool:
        return any(r.changed for r in self.results)

    def to_json(self) -> dict:
        return {"ok": self.ok, "changed": self.changed, "reverted": self.reverted, "release": self.release,
                "endpoint": self.endpoint, "error": self.error or None, "detail": self.detail or None,
                "roles": [r.to_json() for r in self.results]}


def converge(ctx: Context, *, diff: bool = False) -> Outcome:
    outcome = Outcome(ok=True)
    for role in ROLES:
        try:
            plan = role.plan(ctx)
        except (RoleFailed, UnknownVariable) as exc:
            return _failed(ctx, outcome, role.NAME, exc, stopped_anything=False)
        if plan.errors:
            message = "; ".join(str(f) for f in plan.errors)
            return _failed(ctx, outcome, role.NAME, RoleFailed(message), stopped_anything=False, plan=plan)
        if ctx.check or not plan.changed:
            outcome.results.append(_planned(plan, diff, ctx.check))
            continue
        ctx.before_change()
        try:
            msg = role.apply(ctx, plan)
        except (RoleFailed, Unhealthy, SupervisorError, xmlrpc.client.Error, OSError) as exc:
            return _failed(ctx, outcome, role.NAME, exc, stopped_anything=ctx.switched, plan=plan, diff=diff)
        except KeyboardInterrupt:
            # Ctrl-C after the old engine was stopped must not leave the box without one
            return _failed(ctx, outcome, role.NAME, RoleFailed("interrupted"), stopped_anything=ctx.switched,
                           plan=plan, diff=diff)
        outcome.results.append(RoleResult(role.NAME, "changed", msg, plan.diff() if diff else "",
                                          [c.what for c in plan.changes], plan.warnings, plan.notes))
    outcome.release = ctx.desired.release if ctx.desired else (ctx.build.release_id if ctx.build else None)
    outcome.endpoint = ctx.endpoint
    return outcome


def _planned(plan: RolePlan, diff: bool, check: bool) -> RoleResult:
    status = "changed" if plan.changed else "ok"
    msg = plan.reason if not check or not plan.changed else f"would {plan.reason}"
    return RoleResult(plan.role, status, msg, plan.diff() if diff else "", [c.what for c in plan.changes],
                      plan.warnings, plan.notes)


def _failed(ctx: Context, outcome: Outcome, role: str, exc: Exception, *, stopped_anything: bool,
            plan: RolePlan | None = None, diff: bool = False) -> Outcome:
    outcome.ok = False
    outcome.error = f"{role}: {exc}"
    outcome.detail = getattr(exc, "detail", "")
    outcome.results.append(RoleResult(role, "failed", str(exc), plan.diff() if plan and diff else "",
                                      [c.what for c in plan.changes] if plan else [],
                                      plan.warnings if plan else [], plan.notes if plan else []))
    done = {r.name for r in outcome.results}
    outcome.results += [RoleResult(r.NAME, "skipped", f"not run: {role} failed") for r in ROLES
                        if r.NAME not in done]
    if stopped_anything and not ctx.check:
        revert(ctx, outcome)
    current = ctx.state.current
    outcome.release = current.release if current else None
    outcome.endpoint = current.endpoint if current else None
    return outcome


def revert(ctx: Context, outcome: Outcome) -> None:
    """Put last good back exactly as it ran (stored config, no re-render), and prove it is healthy again."""
    name, last_good, failed = ctx.spec.server.name, ctx.state.last_good, ctx.desired
    supervisor = ctx.supervisor
    if last_good is None:
        if supervisor.is_running():
            supervisor.stop(name, grace=ctx.spec.server.stop_wait_s)
        ctx.state.current = None
        ctx.state.save(ctx.layout.state_file)
        outcome.error += "; no last good release to revert to (first install): the engine is left stopped"
        return
    if failed is not None and failed.same_config(last_good):
        outcome.error += f"; last good ({last_good.release}) is this same config, so there is nothing to revert to"
        return
    ctx.say(f"reverting to last good release {last_good.release}")
    service.switch_to(ctx, last_good)
    try:
        # last good passed its soak already: prove it answers, don't make the outage longer
        wait_healthy(probe.target(ctx), probe.process_state(ctx), soak=False)
    except Unhealthy as exc:
        outcome.error += f"; revert to {last_good.release} failed too: {exc}"
        return
    outcome.reverted = True
    outcome.error += f"; reverted to {last_good.release}"
