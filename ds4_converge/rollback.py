"""`ds4-converge rollback SPEC`: back to last good, through the same probe as any switch."""
from __future__ import annotations

from .context import Context
from .plan import RoleResult
from .probe import Unhealthy, wait_healthy
from .reconciler import Outcome
from .roles import probe, service


def rollback(ctx: Context) -> Outcome:
    last_good, current = ctx.state.last_good, ctx.state.current
    if last_good is None:
        return Outcome(ok=False, error="rollback: no last good release recorded",
                       results=[RoleResult("rollback", "failed", "no last good release recorded")])
    running = ctx.supervisor.running_pid(ctx.spec.server.name) if ctx.supervisor.is_running() else None
    if current is not None and current.same_config(last_good) and running:
        return Outcome(ok=True, release=last_good.release, endpoint=last_good.endpoint,
                       results=[RoleResult("rollback", "ok", f"already on last good {last_good.release}")])
    if not ctx.supervisor.is_running():
        ctx.supervisor.start_daemon()
    service.switch_to(ctx, last_good)
    try:
        pid = wait_healthy(probe.target(ctx), probe.process_state(ctx))
    except Unhealthy as exc:
        return Outcome(ok=False, release=last_good.release, error=f"rollback: {last_good.release} is not healthy: {exc}",
                       results=[RoleResult("rollback", "failed", str(exc))])
    return Outcome(ok=True, release=last_good.release, endpoint=last_good.endpoint,
                   results=[RoleResult("rollback", "changed", f"back on {last_good.release} (pid {pid})")])
