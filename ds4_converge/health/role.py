"""Probe role: a switched engine must answer, answer right, and stay up; its verdict lets the switch commit.

The orchestration hands it the engine under probe (:class:`Engine`: where it answers, its watch, its front door's
traffic and early flip, where the verdict goes); health imports nothing of the service that started it."""
from __future__ import annotations

import time
from functools import partial
from typing import Protocol

from ds4_converge.core.context import Context
from ds4_converge.core.crashpoints import crash_point
from ds4_converge.core.plan import Change, Finding, RoleFailed, RolePlan
from ds4_converge.core.state import Deployment
from ds4_converge.core.verdict import Verdict
from ds4_converge.health import bench, gate, platform, warmup, worker
from ds4_converge.health.probe import (EngineWatch, NotReady, ProbeTarget, Unhealthy, check_models, soak_engine,
                                       wait_healthy)

NAME = "probe"


class Engine(Protocol):
    """The engine under probe, as the orchestration hands it (service/switch.py UnderProbe)."""

    endpoint: str  # where it answers: the probe, the gate and the warm-up talk to it directly
    deployment: Deployment | None  # what runs, as it was started (None: nothing recorded)
    baseline: object | None  # the old engine benched in this run before the switch (gate.Baseline)

    @property
    def started_at(self) -> float | None: ...  # time.monotonic() of its start in this run

    def watch(self) -> EngineWatch: ...

    def traffic(self): ...  # clients' requests on it, from its front door (bench.Traffic), None: not known

    def pids(self) -> set[int]: ...  # its process group

    def flip_before_soak(self): ...  # clients go to it before its soak (None: not on this road)

    def hold_after_flip(self, flip) -> str: ...  # it failed after clients went to it: hold them again

    def passed(self, verdict: Verdict) -> None: ...  # the whole probe passed: the switch commits this


def target(ctx: Context, engine: Engine) -> ProbeTarget:
    health = ctx.spec.health
    # what was started last (a revert starts last good, whatever the spec says now), else this spec's part
    current, part = engine.deployment, ctx.spec.distributed
    if current is not None:
        listen = worker.listen_of(current.command)
        coordinator = worker.listen_of(current.command, "coordinator")
    else:
        listen = part.listen if part and part.worker else None
        coordinator = part.listen if part and not part.worker else None
    return ProbeTarget(endpoint=engine.endpoint, deadline_s=health.deadline_s, soak_s=health.soak_s,
                       interval_s=health.interval_s, smoke=None if listen else health.smoke, worker=listen,
                       tool_call=health.tool_call and not listen,
                       speculative=ctx.spec.server.speculative.mode != "off" and not listen,
                       coordinator=coordinator)


def prove(ctx: Context, engine: Engine, *, soak: bool = True) -> int:
    """The engine answers (and, with `soak`, stays up): its pid; raises Unhealthy."""
    return wait_healthy(target(ctx, engine), engine.watch(), soak=soak)


def _worker(ctx: Context):
    """This box's distributed part when it is a worker (no HTTP API: its log and data port tell its health)."""
    d = ctx.spec.distributed
    return d if d is not None and d.worker else None


def _probe_worker(ctx: Context, engine: Engine, *, soak: bool = True) -> tuple[int, worker.WorkerState]:
    watch = engine.watch()
    health = ctx.spec.health
    return worker.wait_worker(watch, watch.log_text, _worker(ctx).listen, deadline_s=health.deadline_s,
                              soak_s=health.soak_s if soak else 0)


def needs_full_probe(ctx: Context) -> bool:
    last_good = ctx.state.last_good
    return ctx.restart_needed or ctx.desired is None or not ctx.desired.same_config(last_good)


def plan(ctx: Context, engine: Engine) -> RolePlan:
    health = ctx.spec.health
    part = _worker(ctx)
    if part is not None:
        return _plan_worker(ctx, engine, part)
    if needs_full_probe(ctx):
        ladder = "/v1/models" + (", smoke answer (plain and streamed)" if health.smoke else "")
        ladder += ", the smoke at concurrency 2, sampled" if health.smoke and ctx.spec.server.speculative.mode != "off" \
            else ""
        ladder += ", a tool call" if health.tool_call else ""
        ladder += f", {health.soak_s:.0f}s soak"
        ladder += ", performance gate" if gate.enabled(health) else ""
        ladder += f", {len(health.warmup)} warm-up prompt(s)" if health.warmup else ""
        findings = [Finding("info", "no front door: the performance gate's benches cannot tell clients' requests "
                                    "from their own, so a gate benched while clients ask is unreliable (with "
                                    "`front`, each engine is benched alone)")] \
            if gate.enabled(health) and ctx.spec.front is None else []
        return RolePlan(NAME, [Change(f"probe {engine.endpoint}: {ladder}; record last good",
                                      action=partial(_probe, engine=engine))],
                        reason=f"probe the new engine ({ladder})", findings=findings)
    try:
        check_models(engine.endpoint)
    except NotReady as exc:
        # the config is last good and supervisord runs it, but it does not answer yet: supervisord restarted it
        # after a crash and it is loading. Wait for it (up to deadline_s) instead of failing.
        state, pid, _ = engine.watch().state()
        if state not in ("RUNNING", "STARTING"):
            raise RoleFailed(f"{engine.endpoint} is not healthy: {exc}") from None
        return RolePlan(NAME, [Change(f"wait up to {health.deadline_s:.0f}s for {engine.endpoint}: ds4-server (pid "
                                      f"{pid}) is {state.lower()} but not answering yet ({exc})",
                                      action=partial(_wait_again, engine=engine))],
                        reason=f"wait for {engine.endpoint} (supervisord restarted ds4-server; it is loading)")
    except Unhealthy as exc:
        raise RoleFailed(f"{engine.endpoint} is not healthy: {exc}") from None
    return RolePlan(NAME, reason=f"{engine.endpoint} answers /v1/models; last good is {ctx.state.last_good.release}")


def _plan_worker(ctx: Context, engine: Engine, part) -> RolePlan:
    where = f"worker {part.layers} (data port {part.listen}, coordinator {part.coordinator})"
    if needs_full_probe(ctx):
        ladder = f"its log says it is loaded, its data port accepts, {ctx.spec.health.soak_s:.0f}s soak"
        return RolePlan(NAME, [Change(f"probe {where}: {ladder}; record last good",
                                      action=partial(_probe, engine=engine))],
                        reason=f"probe the new {where}")
    watch = engine.watch()
    state, pid, _ = watch.state()
    if state not in ("RUNNING", "STARTING"):
        raise RoleFailed(f"{where} is not running (supervisord: {state})")
    problem = worker.judge(worker.observe(watch.log_text(), part.listen))
    if problem is not None:
        return RolePlan(NAME, [Change(f"wait up to {ctx.spec.health.deadline_s:.0f}s for {where}: ds4-server (pid "
                                      f"{pid}) is {state.lower()} but {problem}",
                                      action=partial(_wait_again, engine=engine))], reason=f"wait for {where}")
    return RolePlan(NAME, reason=f"{where} runs (pid {pid}); last good is {ctx.state.last_good.release}")


def _wait_again(ctx: Context, *, engine: Engine) -> str:
    """Last good, restarted by supervisord: it must answer again; nothing new to record."""
    ctx.say(f"waiting for {engine.endpoint} (deadline {ctx.spec.health.deadline_s:.0f}s)")
    try:
        pid = wait_healthy(target(ctx, engine), engine.watch(), soak=False)
    except Unhealthy as exc:
        raise RoleFailed(f"last good release {ctx.state.last_good.release} does not come back: {exc}") from None
    return f"healthy again (pid {pid}); release {ctx.state.last_good.release} is last good"


def _probe(ctx: Context, *, engine: Engine) -> str:
    part = _worker(ctx)
    what = f"worker {part.layers} (data port {part.listen})" if part else engine.endpoint
    ctx.say(f"probing {what} (deadline {ctx.spec.health.deadline_s:.0f}s, soak {ctx.spec.health.soak_s:.0f}s)")
    if part:
        try:
            pid, state = _probe_worker(ctx, engine)
        except Unhealthy as exc:
            raise RoleFailed(f"release {ctx.desired.release} is not healthy: {exc}", exc.detail) from None
        crash_point("probed")
        # no HTTP API: no gate, no warm-up; the coordinator's probe answers for the pair
        engine.passed(Verdict(ctx.desired, pid))
        return f"healthy (pid {pid}); worker up, {state.describe()}"
    probed, watch = target(ctx, engine), engine.watch()
    try:
        pid = wait_healthy(probed, watch, soak=False)
    except Unhealthy as exc:
        raise RoleFailed(f"release {ctx.desired.release} is not healthy: {exc}", exc.detail) from None
    load_s = round(time.monotonic() - engine.started_at, 1) if engine.started_at is not None else None
    # the gate measures the engine alone: before any client reaches it (service/switch.py flip_before_soak)
    measured, said = performance_gate(ctx, engine)
    flip = engine.flip_before_soak()
    try:
        soak_engine(probed, watch, pid)
    except Unhealthy as exc:
        served = f"; {engine.hold_after_flip(flip)}" if flip else ""
        raise RoleFailed(f"release {ctx.desired.release} is not healthy: {exc}{served}", exc.detail) from None
    crash_point("probed")
    said += warm_up(ctx, engine) + memory_plan(ctx, engine)
    # the verdict: the orchestration has the switch commit it (last good recorded, guard disarmed, prune)
    engine.passed(Verdict(ctx.desired, pid, measured, load_s))
    ready = f"; answered its smoke {load_s:g}s after its start" if load_s is not None else ""
    return f"healthy (pid {pid}){ready}" + "".join(f"; {line}" for line in said)


def performance_gate(ctx: Context, engine: Engine) -> tuple[dict | None, list[str]]:
    """Bench the new engine and refuse it when it is too slow (the reconciler then reverts it)."""
    health = ctx.spec.health
    if not gate.enabled(health):
        return None, []
    ctx.say("performance gate: a short bench of the new engine")
    try:
        # no client reaches it yet (held, or a candidate beside): the front door's stats say so all the same
        record = bench.bench(ctx, gate.GATE_BENCH, engine.deployment, engine.endpoint, kind="gate",
                             traffic=engine.traffic())
        slow = platform.slow_reasons(record.get("platform"), engine.pids())
        verdict = gate.judge(gate.decode_tps(record), health, ctx.state.last_good, baseline=engine.baseline,
                             platform_slow=slow, contaminated=tuple(record["alone"]["contaminated"]))
    except (bench.BenchError, NotReady, Unhealthy) as exc:
        raise RoleFailed(f"release {ctx.desired.release} failed the performance gate's bench: {exc}") from None
    except gate.TooSlow as exc:
        raise RoleFailed(f"release {ctx.desired.release} is too slow: {exc}") from None
    if verdict.platform_slow:
        ctx.say(f"WARNING: {verdict.message}")
    return {"decode_tps": verdict.decode_tps, "at": record["at"]}, [verdict.message]


def memory_plan(ctx: Context, engine: Engine) -> list[str]:
    """What the engine said it takes at this start (its "planned" / "context buffers" lines) beside the budget."""
    from ds4_converge.models import budget

    planned = budget.read_plan(engine.watch().log_text())
    if planned is None or ctx.memory is None:
        return []
    level, message = budget.against_plan(planned, ctx.memory.estimate)
    if level == "warn":
        ctx.say(f"WARNING: {message}")
    return [message]


def warm_up(ctx: Context, engine: Engine) -> list[str]:
    """Replay the warm-up prompts; a prompt that cannot be replayed is reported, not a reason to revert."""
    paths = [ctx.host_path(raw) for raw in ctx.spec.health.warmup]
    if not paths:
        return []
    ctx.say(f"warming the KV cache with {len(paths)} prompt(s)")
    try:
        return [w.describe() for w in warmup.replay(engine.endpoint, paths, ctx.spec.server.ctx)]
    except warmup.BadPrompt as exc:
        return [f"warm-up not done: {exc}"]
