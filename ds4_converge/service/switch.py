"""A switch and its revert: one operation of the service domain, with the switch guard.

The service role switches (:func:`switch_to`); when a later step fails, the orchestration calls :func:`revert`
once and proves with the probe that what it started answers; :func:`settle` ends the switch (the guard has
nothing left to bring back) and :func:`recover_stale` repairs one whose run died. What serves after things
went wrong is said by :func:`serving`. The orchestration above knows none of supervisord, the guard or the
program files: they are this module's business.
"""
from __future__ import annotations

import http.client
from dataclasses import dataclass

from ds4_converge.core import interrupts
from ds4_converge.core.context import Context
from ds4_converge.core.crashpoints import crash_point
from ds4_converge.core.engine_http import request
from ds4_converge.core.state import Deployment
from ds4_converge.service import drain, guard, secrets, start_log
from ds4_converge.service.render import read_program_conf

def write_program(ctx: Context, deployment: Deployment) -> None:
    """The program file with its secrets, 0600; their values kept for last good and rollback's target too."""
    keep = {d.program_conf for d in (ctx.state.last_good, ctx.state.previous_good) if d}
    secrets.write_program(ctx.layout, ctx.layout.program_conf(ctx.spec.server.name), deployment.program_conf, keep)


# An engine that never passed the probe serves nobody: nothing to drain, no generation to cut, no KV checkpoint
# worth waiting server.stop_wait_s for. A short grace, then SIGKILL of its process group, so a revert fits its own
# deadline whatever the new engine does (a hung load ignores SIGTERM).
UNPROVEN_STOP_GRACE_S = 5


def _answers(endpoint: str) -> bool:
    try:
        return request(endpoint, "GET", "/v1/models", timeout=3)[0] == 200
    except (OSError, http.client.HTTPException):
        return False


def stop_grace(spec) -> int:
    """How long a stop waits before SIGKILL: server.stop_wait_s, or a distributed worker's short stop_grace_s
    (it holds no HTTP requests and writes no KV checkpoint; its second SIGTERM ends it at once)."""
    d = spec.distributed
    return int(d.stop_grace_s) if d is not None and d.worker else spec.server.stop_wait_s


def switch_to(ctx: Context, deployment: Deployment, *, reason: str = "switch") -> None:
    """Stop what runs (whole process group) once it is idle, then start `deployment` exactly as recorded.

    The intent is recorded and the guard armed first: if this process dies anywhere from here until the switch
    is settled (:func:`settle`), supervisord's guard brings last good back (see service/guard.py). What is
    stopped is waited for as long as it deserves, and the run says so: an engine that answers is drained and
    given server.stop_wait_s; one that does not (the unproven engine of a revert, a hung one) gets
    UNPROVEN_STOP_GRACE_S before SIGKILL."""
    name, step = ctx.spec.server.name, "" if reason == "switch" else f"{reason}-"
    grace = stop_grace(ctx.spec)
    pid = ctx.supervisor.running_pid(name)
    running = ctx.state.current.endpoint if ctx.state.current else ctx.endpoint
    if pid and reason != "revert" and _answers(running):  # the engine cuts a generation on SIGTERM: wait until idle
        ctx.drained = drain.wait_idle(running, ctx.spec.server.drain_s, say=ctx.say)
        ctx.say(f"stopping {name} (pid {pid}): SIGTERM, SIGKILL after {grace}s if it has not exited "
                f"(server.stop_wait_s)")
    else:  # nothing runs, or an engine (RUNNING, STARTING, …) that serves nobody
        grace = UNPROVEN_STOP_GRACE_S
        info = ctx.supervisor.info(name) if ctx.supervisor.is_running() else None
        if info and info["pid"]:
            why = "never passed the probe" if reason == "revert" else f"does not answer on {running}"
            ctx.say(f"stopping {name} (pid {info['pid']}, {why}): nothing to drain, SIGKILL after {grace}s")
    guard.arm(ctx.layout, ctx.supervisor, name=name, grace=UNPROVEN_STOP_GRACE_S, fallback=ctx.state.last_good)
    crash_point(f"{step}intent")
    ctx.supervisor.stop(name, grace=grace)
    crash_point(f"{step}old-stopped")
    ctx.state.current = deployment
    ctx.state.save(ctx.layout.state_file)
    write_program(ctx, deployment)
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
        if ctx.supervisor.is_running():  # the unproven engine of a first install
            ctx.supervisor.stop(name, grace=UNPROVEN_STOP_GRACE_S)
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
