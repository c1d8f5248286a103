"""Probe role: a switched engine must answer, answer right, and stay up; its verdict lets the switch commit."""
from __future__ import annotations

import re
import shlex
import time

from ds4_converge.core.context import Context, Verdict
from ds4_converge.core.crashpoints import crash_point
from ds4_converge.core.plan import Change, Finding, RoleFailed, RolePlan
from ds4_converge.health import bench, gate, platform, warmup, worker
from ds4_converge.health.probe import NotReady, ProbeTarget, Unhealthy, check_models, soak_engine, wait_healthy
from ds4_converge.engine_knowledge import load as load_knowledge
from ds4_converge.service import start_log, switch
from ds4_converge.tool_command import tool_command

NAME = "probe"
STAMP = re.compile(load_knowledge()["logs"]["stamp"])  # ds4-server's own lines begin with MMDD HH:MM:SS
# b030961 ends a refused start with its own summary after the engine's reason ("ds4: distributed coordinator
# sessions require the graph backend", then "ds4-server: failed to create cpu session 1/1")
SUMMARY = re.compile(r"^ds4-server: failed to create \S+ session")


def target(ctx: Context) -> ProbeTarget:
    health = ctx.spec.health
    # what was started last (a revert starts last good, whatever the spec says now), else this spec's part
    current, part = ctx.engine_deployment, ctx.spec.distributed
    if current is not None:
        listen = worker.listen_of(current.command)
        coordinator = worker.listen_of(current.command, "coordinator")
    else:
        listen = part.listen if part and part.worker else None
        coordinator = part.listen if part and not part.worker else None
    return ProbeTarget(endpoint=ctx.endpoint, deadline_s=health.deadline_s, soak_s=health.soak_s,
                       interval_s=health.interval_s, smoke=None if listen else health.smoke, worker=listen,
                       tool_call=health.tool_call and not listen,
                       speculative=ctx.spec.server.speculative.mode != "off" and not listen,
                       coordinator=coordinator)


class Watch:
    """The engine of the last start, as supervisord and the logs see it (health.probe.EngineWatch)."""

    def __init__(self, ctx: Context):
        self.ctx, self.name = ctx, ctx.engine_program
        self.start = ctx.start or start_log.mark(ctx.layout, self.name)  # no mark: a start by someone else

    def state(self) -> tuple[str, int | None, str]:
        supervisor = self.ctx.supervisor
        info = supervisor.info(self.name) if supervisor.is_running() else None
        if info is None:
            return "UNKNOWN", None, "not loaded in supervisord"
        return info["statename"], info["pid"], info["spawnerr"] or ""

    def exits(self) -> list[str]:
        return start_log.exits(self.start, self.name)

    def last_words(self) -> str:
        lines = [STAMP.sub("", line) for line in start_log.engine_lines(self.start, 2).strip().splitlines()]
        if len(lines) == 2 and SUMMARY.match(lines[1]):
            return f"{lines[0]} ({lines[1]})"  # the reason is the line before ds4-server's summary of it
        return lines[-1] if lines else ""

    def log_text(self) -> str:
        return start_log.engine_text(self.start)

    def last_lines(self) -> str:
        lines = start_log.engine_lines(self.start, 15)
        whole = f"the whole log: {tool_command()} logs {shlex.quote(str(self.ctx.loaded.path))}"
        return (f"last lines of this start:\n{lines}({whole})" if lines
                else f"this start wrote no log lines ({whole})")


def process_state(ctx: Context) -> Watch:
    return Watch(ctx)


def _worker(ctx: Context):
    """This box's distributed part when it is a worker (no HTTP API: its log and data port tell its health)."""
    d = ctx.spec.distributed
    return d if d is not None and d.worker else None


def _probe_worker(ctx: Context, *, soak: bool = True) -> tuple[int, worker.WorkerState]:
    watch = process_state(ctx)
    health = ctx.spec.health
    return worker.wait_worker(watch, watch.log_text, _worker(ctx).listen, deadline_s=health.deadline_s,
                              soak_s=health.soak_s if soak else 0)


def needs_full_probe(ctx: Context) -> bool:
    last_good = ctx.state.last_good
    return ctx.restart_needed or ctx.desired is None or not ctx.desired.same_config(last_good)


def plan(ctx: Context) -> RolePlan:
    health = ctx.spec.health
    part = _worker(ctx)
    if part is not None:
        return _plan_worker(ctx, part)
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
        return RolePlan(NAME, [Change(f"probe {ctx.endpoint}: {ladder}; record last good", action=_probe)],
                        reason=f"probe the new engine ({ladder})", findings=findings)
    try:
        check_models(ctx.endpoint)
    except NotReady as exc:
        # the config is last good and supervisord runs it, but it does not answer yet: supervisord restarted it
        # after a crash and it is loading. Wait for it (up to deadline_s) instead of failing.
        state, pid, _ = process_state(ctx).state()
        if state not in ("RUNNING", "STARTING"):
            raise RoleFailed(f"{ctx.endpoint} is not healthy: {exc}") from None
        return RolePlan(NAME, [Change(f"wait up to {health.deadline_s:.0f}s for {ctx.endpoint}: ds4-server (pid "
                                      f"{pid}) is {state.lower()} but not answering yet ({exc})", action=_wait_again)],
                        reason=f"wait for {ctx.endpoint} (supervisord restarted ds4-server; it is loading)")
    except Unhealthy as exc:
        raise RoleFailed(f"{ctx.endpoint} is not healthy: {exc}") from None
    return RolePlan(NAME, reason=f"{ctx.endpoint} answers /v1/models; last good is {ctx.state.last_good.release}")


def _plan_worker(ctx: Context, part) -> RolePlan:
    where = f"worker {part.layers} (data port {part.listen}, coordinator {part.coordinator})"
    if needs_full_probe(ctx):
        ladder = f"its log says it is loaded, its data port accepts, {ctx.spec.health.soak_s:.0f}s soak"
        return RolePlan(NAME, [Change(f"probe {where}: {ladder}; record last good", action=_probe)],
                        reason=f"probe the new {where}")
    watch = process_state(ctx)
    state, pid, _ = watch.state()
    if state not in ("RUNNING", "STARTING"):
        raise RoleFailed(f"{where} is not running (supervisord: {state})")
    problem = worker.judge(worker.observe(watch.log_text(), part.listen))
    if problem is not None:
        return RolePlan(NAME, [Change(f"wait up to {ctx.spec.health.deadline_s:.0f}s for {where}: ds4-server (pid "
                                      f"{pid}) is {state.lower()} but {problem}",
                                      action=_wait_again)], reason=f"wait for {where}")
    return RolePlan(NAME, reason=f"{where} runs (pid {pid}); last good is {ctx.state.last_good.release}")


def _wait_again(ctx: Context) -> str:
    """Last good, restarted by supervisord: it must answer again; nothing new to record."""
    ctx.say(f"waiting for {ctx.endpoint} (deadline {ctx.spec.health.deadline_s:.0f}s)")
    try:
        pid = wait_healthy(target(ctx), process_state(ctx), soak=False)
    except Unhealthy as exc:
        raise RoleFailed(f"last good release {ctx.state.last_good.release} does not come back: {exc}") from None
    return f"healthy again (pid {pid}); release {ctx.state.last_good.release} is last good"


def _probe(ctx: Context) -> str:
    part = _worker(ctx)
    what = f"worker {part.layers} (data port {part.listen})" if part else ctx.endpoint
    ctx.say(f"probing {what} (deadline {ctx.spec.health.deadline_s:.0f}s, soak {ctx.spec.health.soak_s:.0f}s)")
    if part:
        try:
            pid, state = _probe_worker(ctx)
        except Unhealthy as exc:
            raise RoleFailed(f"release {ctx.desired.release} is not healthy: {exc}", exc.detail) from None
        crash_point("probed")
        # no HTTP API: no gate, no warm-up; the coordinator's probe answers for the pair
        ctx.verdict = Verdict(ctx.desired, pid)
        return f"healthy (pid {pid}); worker up, {state.describe()}"
    probed, watch = target(ctx), process_state(ctx)
    try:
        pid = wait_healthy(probed, watch, soak=False)
    except Unhealthy as exc:
        raise RoleFailed(f"release {ctx.desired.release} is not healthy: {exc}", exc.detail) from None
    load_s = round(time.monotonic() - ctx.start.at, 1) if ctx.start is not None else None
    # the gate measures the engine alone: before any client reaches it (service/switch.py flip_before_soak)
    measured, said = performance_gate(ctx)
    flip = switch.flip_before_soak(ctx)
    try:
        soak_engine(probed, watch, pid)
    except Unhealthy as exc:
        served = f"; {switch.hold_after_flip(ctx, flip)}" if flip else ""
        raise RoleFailed(f"release {ctx.desired.release} is not healthy: {exc}{served}", exc.detail) from None
    crash_point("probed")
    said += warm_up(ctx) + memory_plan(ctx)
    # the verdict: the orchestration has the switch commit it (last good recorded, guard disarmed, prune)
    ctx.verdict = Verdict(ctx.desired, pid, measured, load_s)
    ready = f"; answered its smoke {load_s:g}s after its start" if load_s is not None else ""
    return f"healthy (pid {pid}){ready}" + "".join(f"; {line}" for line in said)


def performance_gate(ctx: Context) -> tuple[dict | None, list[str]]:
    """Bench the new engine and refuse it when it is too slow (the reconciler then reverts it)."""
    health = ctx.spec.health
    if not gate.enabled(health):
        return None, []
    ctx.say("performance gate: a short bench of the new engine")
    try:
        # no client reaches it yet (held, or a candidate beside): the front door's stats say so all the same
        record = bench.bench(ctx, gate.GATE_BENCH, kind="gate",
                             traffic=switch.probed_traffic(ctx))
        slow = platform.slow_reasons(record.get("platform"), _engine_pids(ctx))
        verdict = gate.judge(gate.decode_tps(record), health, ctx.state.last_good, baseline=ctx.gate_baseline,
                             platform_slow=slow, contaminated=tuple(record["alone"]["contaminated"]))
    except (bench.BenchError, NotReady, Unhealthy) as exc:
        raise RoleFailed(f"release {ctx.desired.release} failed the performance gate's bench: {exc}") from None
    except gate.TooSlow as exc:
        raise RoleFailed(f"release {ctx.desired.release} is too slow: {exc}") from None
    if verdict.platform_slow:
        ctx.say(f"WARNING: {verdict.message}")
    return {"decode_tps": verdict.decode_tps, "at": record["at"]}, [verdict.message]


def _engine_pids(ctx: Context) -> set[int]:
    """The engine's process group: on the GPU it is no tenant."""
    from ds4_converge.core import processes

    pid = ctx.supervisor.running_pid(ctx.engine_program) if ctx.supervisor.is_running() else None
    return set(processes.group_members(pid)) | {pid} if pid else set()


def memory_plan(ctx: Context) -> list[str]:
    """What the engine said it takes at this start (its "planned" / "context buffers" lines) beside the budget."""
    from ds4_converge.models import budget

    planned = budget.read_plan(process_state(ctx).log_text())
    if planned is None or ctx.memory is None:
        return []
    level, message = budget.against_plan(planned, ctx.memory.estimate)
    if level == "warn":
        ctx.say(f"WARNING: {message}")
    return [message]


def warm_up(ctx: Context) -> list[str]:
    """Replay the warm-up prompts; a prompt that cannot be replayed is reported, not a reason to revert."""
    paths = [ctx.host_path(raw) for raw in ctx.spec.health.warmup]
    if not paths:
        return []
    ctx.say(f"warming the KV cache with {len(paths)} prompt(s)")
    try:
        return [w.describe() for w in warmup.replay(ctx.endpoint, paths, ctx.spec.server.ctx)]
    except warmup.BadPrompt as exc:
        return [f"warm-up not done: {exc}"]
