"""A switch and its revert: one operation of the service domain, with the switch guard.

The service role switches (:func:`switch_to`); when a later step fails, the orchestration calls :func:`revert`
once and proves with the probe that what it started answers; :func:`settle` ends the switch (the guard has
nothing left to bring back) and :func:`recover_stale` repairs one whose run died. What serves after things
went wrong is said by :func:`serving`. The orchestration above knows none of supervisord, the guard or the
program files: they are this module's business.
"""
from __future__ import annotations

from dataclasses import dataclass

from ds4_converge.core import interrupts
from ds4_converge.core.context import Context
from ds4_converge.core.crashpoints import crash_point
from ds4_converge.core.layout import write_atomic
from ds4_converge.core.state import Deployment
from ds4_converge.service import drain, guard, start_log
from ds4_converge.service.render import read_program_conf


def stop_grace(spec) -> int:
    """How long a stop waits before SIGKILL: server.stop_wait_s, or a distributed worker's short stop_grace_s
    (it holds no HTTP requests and writes no KV checkpoint; its second SIGTERM ends it at once)."""
    d = spec.distributed
    return int(d.stop_grace_s) if d is not None and d.worker else spec.server.stop_wait_s


def switch_to(ctx: Context, deployment: Deployment, *, reason: str = "switch") -> None:
    """Stop what runs (whole process group) once it is idle, then start `deployment` exactly as recorded.

    The intent is recorded and the guard armed first: if this process dies anywhere from here until the switch
    is settled (:func:`settle`), supervisord's guard brings last good back (see service/guard.py)."""
    name, step = ctx.spec.server.name, "" if reason == "switch" else f"{reason}-"
    if ctx.supervisor.running_pid(name):  # the engine cuts a generation on SIGTERM: wait until it is idle
        running = ctx.state.current.endpoint if ctx.state.current else ctx.endpoint
        ctx.drained = drain.wait_idle(running, ctx.spec.server.drain_s, say=ctx.say)
    guard.arm(ctx.layout, ctx.supervisor, name=name, grace=stop_grace(ctx.spec),
              fallback=ctx.state.last_good)
    crash_point(f"{step}intent")
    ctx.supervisor.stop(name, grace=stop_grace(ctx.spec))
    crash_point(f"{step}old-stopped")
    ctx.state.current = deployment
    ctx.state.save(ctx.layout.state_file)
    write_atomic(ctx.layout.program_conf(name), deployment.program_conf)
    crash_point(f"{step}program-written")
    ctx.say(f"starting {name} on release {deployment.release}")
    ctx.start = start_log.mark(ctx.layout, name)  # a failure report shows only what this start wrote
    ctx.supervisor.load(name)
    if reason == "switch":
        crash_point("new-started")


@dataclass(frozen=True)
class Revert:
    started: Deployment | None  # last good, started again exactly as it ran: the caller proves it answers
    note: str = ""  # when nothing was started: why, for the report


def revert(ctx: Context) -> Revert:
    """Put last good back exactly as it ran (stored config, no re-render). With no last good (a first install)
    the unproven engine is stopped; when last good is the very config that failed there is nothing to go to.
    Raises what talking to supervisord raises: the caller reports it with :func:`serving`."""
    name, last_good, failed = ctx.spec.server.name, ctx.state.last_good, ctx.desired
    if last_good is None:
        if ctx.supervisor.is_running():
            ctx.supervisor.stop(name, grace=stop_grace(ctx.spec))
        ctx.state.current = None
        ctx.state.save(ctx.layout.state_file)
        return Revert(None, "no last good release to revert to (first install): the engine is left stopped")
    if failed is not None and failed.same_config(last_good):
        return Revert(None, f"last good ({last_good.release}) is this same config, so there is nothing to revert "
                            f"to; serving now: {serving(ctx)}")
    ctx.say(f"reverting to last good release {last_good.release}")
    switch_to(ctx, last_good, reason="revert")
    return Revert(last_good)


def roll_back_to(ctx: Context, target: Deployment) -> None:
    """`rollback`'s switch: supervisord up if it is not, then to `target` (shielded: once the running engine is
    stopped, the target must be started)."""
    if not ctx.supervisor.is_running():
        ctx.supervisor.start_daemon()
    with interrupts.shielded():
        switch_to(ctx, target, reason="rollback")


def running_pid(ctx: Context) -> int | None:
    """The engine's PID under this root's supervisord; None when it or supervisord does not run."""
    return ctx.supervisor.running_pid(ctx.spec.server.name) if ctx.supervisor.is_running() else None


def recover_stale(ctx: Context) -> str | None:
    """For a run, under its lock, before it plans: a switch whose run died and that no guard repaired."""
    return guard.recover_stale(ctx.layout)


def settle(ctx: Context) -> None:
    """The switch is settled (proven, reverted, or reported as failed with what serves): the guard stands down."""
    guard.disarm(ctx.layout)


def serving(ctx: Context) -> str:
    """What runs under this root right now, in words, for a report after things went wrong."""
    name = ctx.spec.server.name
    try:
        info = ctx.supervisor.info(name) if ctx.supervisor.is_running(settle=5) else None
    except Exception as exc:  # noqa: BLE001 - we are reporting on a failure: never fail the report
        return f"unknown (supervisord: {exc})"
    if not info or info["statename"] not in ("RUNNING", "STARTING"):
        return "nothing"
    try:
        release = read_program_conf(ctx.layout.program_conf(name).read_text())[0]
    except OSError:
        release = None
    state = "" if info["statename"] == "RUNNING" else f", {info['statename'].lower()}"
    return f"{name} (pid {info['pid']}{state}) on release {release or 'unknown'}"
