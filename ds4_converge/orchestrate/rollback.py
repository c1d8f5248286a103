"""`ds4-converge rollback SPEC`: back to last good, through the same probe and the same commit as any switch."""
from __future__ import annotations

from ds4_converge.core import interrupts
from ds4_converge.core.context import Context
from ds4_converge.core.role_result import RoleResult
from ds4_converge.core.verdict import Verdict
from ds4_converge.orchestrate import drive
from ds4_converge.orchestrate.reconciler import APPLY_ERRORS, Outcome
from ds4_converge.health import role as probe
from ds4_converge.health.probe import Unhealthy, wait_healthy
from ds4_converge.service import switch
from ds4_converge.service.roads import ROLLBACK
from ds4_converge.service.switch import Switch


def rollback(ctx: Context) -> Outcome:
    """To last good when something else (or nothing) runs; from last good to the good one before it."""
    state = ctx.state
    # an engine just (re)started — by the switch guard after a run died, say — is STARTING for supervisord's
    # startsecs while it may already answer: it runs, and a rollback from it goes to the good release before
    running = switch.running_pid(ctx, starting=True)
    on_last_good = state.current is not None and state.current.same_config(state.last_good) and running
    target = state.previous_good if on_last_good else state.last_good
    if target is None:
        why = "no earlier good release recorded" if on_last_good else "no last good release recorded"
        return Outcome(ok=False, error=f"rollback: {why}", results=[RoleResult("rollback", "failed", why)])
    ctx.desired = target  # what the switch goes to: people are shown what it changes
    sw = Switch(road=ROLLBACK, target=target)
    try:
        if not ctx.supervisor.is_running():
            ctx.supervisor.start_daemon()
        with interrupts.shielded():  # once the running engine is stopped, the target must be started
            drive.run(ctx, sw, ROLLBACK.before_probe())
        engine = sw.under_probe(ctx)
        pid = wait_healthy(probe.target(ctx, engine), engine.watch())
        # proven: clients reach it (a front door points at its slot), recorded as last good, the watchdog asks it
        sw.verdict = Verdict(target, pid, target.bench, target.load_s)
        drive.run(ctx, sw, ROLLBACK.after_probe())
    except Unhealthy as exc:
        return Outcome(ok=False, release=target.release, error=f"rollback: {target.release} is not healthy: {exc}",
                       detail=exc.detail, results=[RoleResult("rollback", "failed", str(exc))])
    except APPLY_ERRORS as exc:  # supervisord refused or is gone: a message, never a traceback
        return Outcome(ok=False, release=target.release, error=f"rollback to {target.release} failed: {exc}",
                       results=[RoleResult("rollback", "failed", str(exc))])
    finally:
        switch.settle(ctx, sw)  # settled either way: the report says what runs
    return Outcome(ok=True, release=target.release, endpoint=target.endpoint,
                   results=[RoleResult("rollback", "changed", f"back on {target.release} (pid {pid})")])
