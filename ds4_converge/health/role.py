"""Probe role: a switched engine must answer, answer right, and stay up before it becomes last good."""
from __future__ import annotations

from ds4_converge.core.context import Context
from ds4_converge.core.crashpoints import crash_point
from ds4_converge.service.guard import disarm
from ds4_converge.core.plan import Change, RoleFailed, RolePlan
from ds4_converge.health.probe import NotReady, ProbeTarget, Unhealthy, check_models, wait_healthy
from ds4_converge.engine.release import prune
from ds4_converge.core.shell import tail

NAME = "probe"


def target(ctx: Context) -> ProbeTarget:
    health = ctx.spec.health
    return ProbeTarget(endpoint=ctx.endpoint, deadline_s=health.deadline_s, soak_s=health.soak_s,
                       interval_s=health.interval_s, smoke=health.smoke)


def process_state(ctx: Context):
    """(statename, pid, detail) of the engine as supervisord sees it; detail carries the log tail on death."""
    name = ctx.spec.server.name

    def read():
        info = ctx.supervisor.info(name) if ctx.supervisor.is_running() else None
        if info is None:
            return "UNKNOWN", None, "not loaded in supervisord"
        detail = ""
        if info["statename"] not in ("RUNNING", "STARTING"):
            detail = f"exit status {info['exitstatus']}; {info['spawnerr'] or ''}\n" + tail(ctx.layout.engine_log(name), 15)
        return info["statename"], info["pid"], detail

    return read


def needs_full_probe(ctx: Context) -> bool:
    last_good = ctx.state.last_good
    return ctx.restart_needed or ctx.desired is None or not ctx.desired.same_config(last_good)


def plan(ctx: Context) -> RolePlan:
    health = ctx.spec.health
    if needs_full_probe(ctx):
        ladder = "/v1/models" + (", smoke answer" if health.smoke else "") + f", {health.soak_s:.0f}s soak"
        return RolePlan(NAME, [Change(f"probe {ctx.endpoint}: {ladder}; record last good", action=_probe)],
                        reason=f"probe the new engine ({ladder})")
    try:
        check_models(ctx.endpoint)
    except NotReady as exc:
        # the config is last good and supervisord runs it, but it does not answer yet: supervisord restarted it
        # after a crash and it is loading. Wait for it (up to deadline_s) instead of failing.
        state, pid, _ = process_state(ctx)()
        if state not in ("RUNNING", "STARTING"):
            raise RoleFailed(f"{ctx.endpoint} is not healthy: {exc}") from None
        return RolePlan(NAME, [Change(f"wait up to {health.deadline_s:.0f}s for {ctx.endpoint}: ds4-server (pid "
                                      f"{pid}) is {state.lower()} but not answering yet ({exc})", action=_wait_again)],
                        reason=f"wait for {ctx.endpoint} (supervisord restarted ds4-server; it is loading)")
    except Unhealthy as exc:
        raise RoleFailed(f"{ctx.endpoint} is not healthy: {exc}") from None
    return RolePlan(NAME, reason=f"{ctx.endpoint} answers /v1/models; last good is {ctx.state.last_good.release}")


def _wait_again(ctx: Context) -> str:
    """Last good, restarted by supervisord: it must answer again; nothing new to record."""
    ctx.say(f"waiting for {ctx.endpoint} (deadline {ctx.spec.health.deadline_s:.0f}s)")
    try:
        pid = wait_healthy(target(ctx), process_state(ctx), soak=False)
    except Unhealthy as exc:
        raise RoleFailed(f"last good release {ctx.state.last_good.release} does not come back: {exc}") from None
    return f"healthy again (pid {pid}); release {ctx.state.last_good.release} is last good"


def _probe(ctx: Context) -> str:
    ctx.say(f"probing {ctx.endpoint} (deadline {ctx.spec.health.deadline_s:.0f}s, soak {ctx.spec.health.soak_s:.0f}s)")
    try:
        pid = wait_healthy(target(ctx), process_state(ctx))
    except Unhealthy as exc:
        raise RoleFailed(f"release {ctx.desired.release} is not healthy: {exc}") from None
    crash_point("probed")
    ctx.state.bless(ctx.desired.stamped())
    ctx.state.save(ctx.layout.state_file)
    disarm(ctx.layout)  # proven and recorded: the switch is settled, the guard has nothing to bring back
    crash_point("blessed")
    # only now is the rollback target known for sure; releases outside it and keep_releases can go
    removed = prune(ctx.layout, ctx.spec.engine.keep_releases, ctx.state.releases_in_use())
    return (f"healthy (pid {pid}); release {ctx.desired.release} is now last good"
            + (f"; removed old release(s) {', '.join(removed)}" if removed else ""))
