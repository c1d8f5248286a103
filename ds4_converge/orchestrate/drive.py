"""The one executor of a switch's road (service/roads.py): each step by name, its crash point named after it.

The service's steps are service/switch.py's (and the service role's for what starts supervisord and the front
door); the baseline bench and the probe again after a take-over are health's, run here, above both, so that the
service never calls up into health. A step returns words for the report, or None.
"""
from __future__ import annotations

from collections.abc import Callable

from ds4_converge.core.context import Context
from ds4_converge.core.crashpoints import crash_point
from ds4_converge.core.plan import RoleFailed
from ds4_converge.health import role as probe
from ds4_converge.service import front
from ds4_converge.service import role as service
from ds4_converge.service import switch
from ds4_converge.service.switch import Switch
from ds4_converge.service.watch import endpoint

# the first of these a road reaches begins the switch: from there a failure reverts (what serves may stop)
BEGINS = ("hold", "drain", "arm guard")


def baseline(ctx: Context, sw: Switch) -> None:
    """With a regression gate, the old engine is benched now, on this box, before it is stopped: the new one is
    judged against that, not against a figure from another session (health/gate.py). Nothing is stopped yet,
    so a bench that fails only leaves the gate its recorded figure. The engine alone: on the held road it is
    benched after the hold and the drain; beside, while it serves, each round waits for a moment without
    clients' requests and is run again when one came (the front door's stats, health/bench.py alone_round)."""
    from ds4_converge.health import bench, gate

    current = ctx.state.current
    if ctx.spec.health.max_regression is None or current is None:
        return
    at = current.endpoint or endpoint(ctx)
    if not switch.answers(at):
        return
    ctx.say(f"performance gate: benching the serving engine ({current.release}) as the baseline")
    try:
        record = bench.bench(ctx, gate.GATE_BENCH, current, at, kind="baseline",
                             traffic=front.traffic(ctx, front.port_of(current)))
        sw.baseline = gate.Baseline(current.release, gate.decode_tps(record), tuple(record["alone"]["contaminated"]))
    except bench.BenchError as exc:
        ctx.say(f"the baseline bench failed ({exc}): the gate uses last good's recorded figure")


def probe_again(ctx: Context, sw: Switch) -> None:
    """What a take-over started again (the candidate's release under server.name) answers: what passed the whole
    probe a moment ago needs no soak again."""
    from ds4_converge.health.probe import Unhealthy

    try:
        probe.prove(ctx, sw.under_probe(ctx), soak=False)
    except Unhealthy as exc:
        raise RoleFailed(f"release {ctx.desired.release} passed the probe beside the serving engine, but not once "
                         f"started as {ctx.spec.server.name}: {exc}", exc.detail) from None


STEPS: dict[str, Callable[[Context, Switch], str | None]] = {
    "check ports": service.check_ports, "hold": switch.hold, "drain": switch.drain_old, "baseline": baseline,
    "arm guard": switch.arm_guard, "stop": switch.stop, "stop unproven": switch.stop_unproven,
    "stop old": switch.stop_old, "wait for memory": switch.wait_for_memory, "install": switch.install,
    "start": switch.start, "start supervisord": service.start_supervisord, "front door": service.start_front_door,
    "install candidate": switch.install_candidate, "start candidate": switch.start_candidate, "flip": switch.flip,
    "probe again": probe_again, "commit": switch.commit, "prune": switch.prune_releases,
    "expose": switch.expose_target, "retire candidate": switch.retire_candidate,
}


def run(ctx: Context, sw: Switch, steps) -> list[str]:
    """Run `steps` ((name, crash point) pairs) in order; what they said, for the report."""
    said = []
    for name, point in steps:
        if name in BEGINS and not sw.begun:
            sw.phase = "begun"
        words = STEPS[name](ctx, sw)
        if point:
            crash_point(point)
        if words:
            said.append(words)
    return said


def begin(ctx: Context, sw: Switch) -> str:
    """The service role chose a road: its steps up to the probe, and the service's line."""
    said = run(ctx, sw, sw.road.before_probe())
    name = ctx.spec.server.name
    if sw.candidate is not None:
        head = f"started {sw.candidate.program} on release {sw.candidate.deployment.release} beside {name}"
    else:
        drained = f" ({sw.drained.describe()})" if sw.drained and sw.drained.in_flight else ""
        head = f"started {name} on release {sw.target.release}{drained}"
    return "; ".join([head, *said])


def commit(ctx: Context, sw: Switch) -> str:
    """The probe's verdict is in: the road's steps after the probe (a take-over beside, the commit, the prune).
    A verdict without a road (what runs was never proven: a run died before its commit) only commits."""
    from ds4_converge.service.roads import ADOPT

    return "; ".join(run(ctx, sw, (sw.road or ADOPT).after_probe()))
