"""A switch as a value of its own (:class:`Switch`), with the steps its roads are made of and the switch guard.

The service role's plan picks a road (service/roads.py) and its apply begins the Switch (:func:`begin`); the
orchestration holds it and runs the road's steps by name (orchestrate/drive.py): the steps below, each one
thing (hold, drain, arm guard, stop, wait for memory, install, start, flip, commit). The intent is recorded and
the guard armed before anything that serves stops, so a run that dies anywhere after is repaired by the guard.
Once the probe's verdict is in, the road's commit steps run (:meth:`Switch.commit`: last good recorded, the guard
disarmed); when a later step fails, :func:`revert` says which road goes back. :func:`settle` ends the switch (the
guard has nothing left to bring back) and :func:`recover_stale` repairs one whose run died. What serves after
things went wrong is said by :func:`serving`. The orchestration above knows none of supervisord, the guard or
the program files: they are this module's business.

With a front door and memory for two engines, the road goes beside the serving one: the new engine is a
candidate program on the idle slot, last good is never stopped before the candidate passed the probe, and a
revert only retires the candidate.
"""
from __future__ import annotations

import http.client
import xmlrpc.client
from dataclasses import dataclass, replace

from ds4_converge.core.context import Context
from ds4_converge.core.crashpoints import crash_point
from ds4_converge.core.engine_http import request
from ds4_converge.core.state import Deployment
from ds4_converge.core.verdict import Verdict
from ds4_converge.engine.release import prune
from ds4_converge.engine_knowledge import load as load_knowledge
from ds4_converge.errors import Ds4Error
from ds4_converge.core import processes
from ds4_converge.service import drain, front, guard, memory_back, secrets, snapshot, start_log, watchdog
from ds4_converge.service.drain import Drained
from ds4_converge.service.roads import REVERT, REVERT_BESIDE, Road
from ds4_converge.service.start_log import StartMark
from ds4_converge.service.watch import Watch, endpoint

MODEL_ID = load_knowledge()["model_id"]


@dataclass
class Candidate:
    """A new engine started beside the one that serves (a front door's blue-green switch): its own supervisord
    program on the idle slot, until the switch commits or reverts."""

    program: str
    deployment: Deployment
    under_probe: bool = True  # the probe, gate and warm-up talk to it; False once the switch commits


@dataclass
class Switch:
    """This run's switch, a value of its own: the service role's apply begins it, the orchestration holds it and
    hands it on (to the probe as the engine under probe, then to the commit or the revert). Nothing of it lives
    on the Context: what it started, where that engine's log begins, what its stop drained, the old engine's
    baseline bench and the probe's verdict are the switch's."""

    road: Road | None = None  # the road it takes (service/roads.py); None while the service role chose none
    phase: str = "idle"  # idle → begun (something that serves may stop) → committed or reverted
    target: Deployment | None = None  # what the road starts under server.name
    candidate: Candidate | None = None  # the new engine started beside the serving one, until it settles
    old_pid: int | None = None  # the engine that ran before the stop …
    old_answered: bool = False  # … and whether it answered (drained, and given server.stop_wait_s) or not
    start: StartMark | None = None  # the engine started last: where its log lines begin
    drained: Drained | None = None  # what the last stop waited for
    baseline: object | None = None  # the old engine benched before the stop (health/gate.py Baseline)
    verdict: Verdict | None = None  # the probe's, until the switch commits it

    @property
    def begun(self) -> bool:
        """The old engine was (or may have been) stopped: a failure from here on needs a revert."""
        return self.phase != "idle"

    @property
    def probed(self) -> Candidate | None:
        """The candidate while the probe, gate and warm-up talk to it; None otherwise."""
        return self.candidate if self.candidate is not None and self.candidate.under_probe else None

    def deployment(self, ctx: Context) -> Deployment | None:
        """What runs as it was started, for those who talk to it: the candidate under probe, else current."""
        return self.probed.deployment if self.probed is not None else ctx.state.current

    def endpoint(self, ctx: Context) -> str:
        """Where the engine under probe answers: the candidate's slot, else the engine's (service/watch.py)."""
        return self.probed.deployment.endpoint if self.probed is not None else endpoint(ctx)

    def program(self, ctx: Context) -> str:
        """The supervisord program of the engine the probe watches: server.name, or the candidate under probe."""
        return self.probed.program if self.probed is not None else ctx.spec.server.name

    def under_probe(self, ctx: Context) -> UnderProbe:
        return UnderProbe(ctx, self)

    def commit(self, ctx: Context) -> str:
        """The probe's verdict says the switched engine is healthy: clients reach it, it is recorded as last good
        (as recorded, for a rollback's target; stamped now otherwise), the watchdog watches it, a candidate still
        beside it is retired, and the guard stands down. Converge and rollback commit through here. Returns what
        it did, in words, for the probe's line."""
        verdict, beside = self.verdict, self.candidate is not None
        expose(ctx, verdict.deployment, self.candidate.deployment if beside else None)
        blessed = verdict.deployment if verdict.deployment.recorded_at else verdict.deployment.stamped()
        ctx.state.bless(replace(blessed, bench=verdict.bench, load_s=verdict.load_s))
        ctx.state.save(ctx.layout.state_file)
        watch_last_good(ctx)
        if beside:  # before the guard stands down: a run that dies meanwhile leaves it for the guard to remove
            _retire_candidate(ctx, self)
        self.phase, self.verdict = "committed", None
        guard.disarm(ctx.layout)  # proven and recorded: the switch is settled, the guard has nothing to bring back
        moved = (f"; clients moved to it beside the old engine, which it replaced as {ctx.spec.server.name} on "
                 f"{verdict.deployment.endpoint}" if beside else "")
        return f"release {verdict.deployment.release} is now last good{moved}"


class UnderProbe:
    """The engine a switch hands the probe (health/role.py Engine): where it answers, its watch, its front door
    traffic and early flip, and where the verdict goes. Health sees this and nothing else of the service."""

    def __init__(self, ctx: Context, sw: Switch):
        self.ctx, self.switch = ctx, sw
        self.endpoint, self.deployment = sw.endpoint(ctx), sw.deployment(ctx)
        self.program = sw.program(ctx)
        self.baseline = sw.baseline

    def watch(self) -> Watch:
        return Watch(self.ctx, self.program, self.switch.start)

    @property
    def started_at(self) -> float | None:
        return self.switch.start.at if self.switch.start is not None else None

    def traffic(self):
        """Clients' requests on this engine, as its front door counts them (health/bench.py Traffic)."""
        return front.traffic(self.ctx, front.port_of(self.deployment))

    def pids(self) -> set[int]:
        """Its process group: on the GPU it is no tenant."""
        supervisor = self.ctx.supervisor
        pid = supervisor.running_pid(self.program) if supervisor.is_running() else None
        return set(processes.group_members(pid)) | {pid} if pid else set()

    def flip_before_soak(self):
        return flip_before_soak(self.ctx, self.switch)

    def hold_after_flip(self, flip) -> str:
        return hold_after_flip(self.ctx, flip)

    def passed(self, verdict: Verdict) -> None:
        """The whole probe passed: the verdict the orchestration has this switch commit."""
        self.switch.verdict = verdict


def write_program(ctx: Context, deployment: Deployment, program: str | None = None) -> None:
    """The program file with its secrets, 0600; their values kept for last good and rollback's target too."""
    keep = {d.program_conf for d in (ctx.state.last_good, ctx.state.previous_good, ctx.state.current) if d}
    secrets.write_program(ctx.layout, ctx.layout.program_conf(program or ctx.spec.server.name),
                          deployment.program_conf, keep)


CANDIDATE_SUFFIX = snapshot.CANDIDATE_SUFFIX  # one spelling: the snapshot reads the candidate by it


def candidate_program(ctx: Context) -> str:
    """The supervisord program of a new engine started beside the serving one (:func:`switch_beside`)."""
    return ctx.spec.server.name + CANDIDATE_SUFFIX


# An engine that never passed the probe serves nobody: nothing to drain, no generation to cut, no KV checkpoint
# worth waiting server.stop_wait_s for. A short grace, then SIGKILL of its process group, so a revert fits its own
# deadline whatever the new engine does (a hung load ignores SIGTERM).
UNPROVEN_STOP_GRACE_S = 5


def answers(endpoint: str) -> bool:
    try:
        return request(endpoint, "GET", "/v1/models", timeout=3)[0] == 200
    except (OSError, http.client.HTTPException):
        return False


def stop_grace(spec) -> int:
    """How long a stop waits before SIGKILL: server.stop_wait_s, or a distributed worker's short stop_grace_s
    (it holds no HTTP requests and writes no KV checkpoint; its second SIGTERM ends it at once)."""
    d = spec.distributed
    return int(d.stop_grace_s) if d is not None and d.worker else spec.server.stop_wait_s


def begin(ctx: Context, *, sw: Switch, road: Road, target: Deployment, candidate: Deployment | None = None) -> str:
    """The service role's apply: this run's switch takes `road` to `target` (and `candidate` beside the serving
    engine); the orchestration runs its steps from here (orchestrate/drive.py)."""
    sw.road, sw.target = road, target
    sw.candidate = Candidate(candidate_program(ctx), candidate) if candidate is not None else None
    return ""


# ------------------------------------------------------------------------- the steps roads are made of


def hold(ctx: Context, sw: Switch) -> None:
    """A front door holds new requests from now until the switch commits or reverts (a revert holds them again:
    clients may have been sent to the engine it stops, flip_before_soak)."""
    front.hold(ctx)


def drain_old(ctx: Context, sw: Switch) -> None:
    """The engine that serves gets no new request now; what it has in flight finishes (it cuts a generation on
    SIGTERM). One that does not answer (a hung one, a crashed one) has nothing to drain."""
    current = ctx.state.current
    running = current.endpoint if current else endpoint(ctx)
    sw.old_pid = ctx.supervisor.running_pid(ctx.spec.server.name)
    sw.old_answered = bool(sw.old_pid) and answers(running)
    if sw.old_answered:
        sw.drained = drain.wait_idle(running, ctx.spec.server.drain_s, say=ctx.say)


def arm_guard(ctx: Context, sw: Switch) -> None:
    """The intent recorded and the guard armed: if this process dies anywhere from here until the switch is
    settled (:func:`settle`), supervisord's guard brings last good back (service/guard.py). With supervisord down
    (a cold start), supervisord starts the guard with the engine, and it watches this intent from then on."""
    supervisor = ctx.supervisor if ctx.supervisor.is_running() else None
    guard.arm(ctx.layout, supervisor, name=ctx.spec.server.name, grace=UNPROVEN_STOP_GRACE_S,
              fallback=ctx.state.last_good, command=ctx.command,
              candidate=sw.candidate.program if sw.candidate else None)


def stop(ctx: Context, sw: Switch) -> None:
    """Stop what runs (whole process group), waited for as long as it deserves, and say so: an engine that
    answered was drained and gets server.stop_wait_s; one that does not (a hung one) gets UNPROVEN_STOP_GRACE_S
    before SIGKILL."""
    name = ctx.spec.server.name
    if sw.old_answered:
        grace = stop_grace(ctx.spec)
        ctx.say(f"stopping {name} (pid {sw.old_pid}): SIGTERM, SIGKILL after {grace}s if it has not exited "
                f"(server.stop_wait_s)")
    else:
        current = ctx.state.current
        grace = _say_unproven(ctx, f"does not answer on {current.endpoint if current else endpoint(ctx)}")
    ctx.supervisor.stop(name, grace=grace)


def stop_unproven(ctx: Context, sw: Switch) -> None:
    """A revert stops the engine that failed: an engine that never passed the probe serves nobody."""
    ctx.supervisor.stop(ctx.spec.server.name, grace=_say_unproven(ctx, "never passed the probe"))


def _say_unproven(ctx: Context, why: str) -> int:
    name = ctx.spec.server.name
    info = ctx.supervisor.info(name) if ctx.supervisor.is_running() else None
    if info and info["pid"]:
        ctx.say(f"stopping {name} (pid {info['pid']}, {why}): nothing to drain, SIGKILL after "
                f"{UNPROVEN_STOP_GRACE_S}s")
    return UNPROVEN_STOP_GRACE_S


def stop_old(ctx: Context, sw: Switch) -> None:
    """Beside: last good, drained, stops; the candidate serves clients meanwhile."""
    name, old = ctx.spec.server.name, ctx.state.current
    ctx.say(f"stopping {name} (release {old.release}): {sw.candidate.program} serves clients meanwhile")
    ctx.supervisor.stop(name, grace=stop_grace(ctx.spec))


def wait_for_memory(ctx: Context, sw: Switch) -> None:
    _await_memory(ctx)


def install(ctx: Context, sw: Switch) -> None:
    """What runs was stopped and the guard is armed: record the target as current and write its program file
    (the guard puts last good back if the run dies from here until it is settled). A new deployment is stamped
    now; last good and a rollback's target go back exactly as recorded."""
    deployment = sw.target if sw.target.recorded_at else sw.target.stamped()
    ctx.state.current = deployment
    ctx.state.save(ctx.layout.state_file)
    write_program(ctx, deployment)


def start(ctx: Context, sw: Switch) -> None:
    name = ctx.spec.server.name
    ctx.say(f"starting {name} on release {sw.target.release}")
    sw.start = start_log.mark(ctx.layout, name)  # a failure report shows only what this start wrote
    ctx.supervisor.load(name)


def install_candidate(ctx: Context, sw: Switch) -> None:
    """Beside: the new engine as its own program on the idle slot, while last good serves where the front door
    points. Nothing that serves is stopped and no request is held."""
    write_program(ctx, sw.candidate.deployment, sw.candidate.program)


def start_candidate(ctx: Context, sw: Switch) -> None:
    candidate, name = sw.candidate, ctx.spec.server.name
    ctx.say(f"starting {candidate.program} on release {candidate.deployment.release} beside {name}, on "
            f"{candidate.deployment.endpoint}")
    sw.start = start_log.mark(ctx.layout, candidate.program)  # a failure report shows only what this start wrote
    ctx.supervisor.load(candidate.program)


def flip(ctx: Context, sw: Switch) -> None:
    """Beside, the candidate passed the probe: clients move to it; last good is drained and replaced next."""
    candidate = sw.candidate
    candidate.under_probe = False
    front.point_at(ctx, front.port_of(candidate.deployment), candidate.deployment)


def commit(ctx: Context, sw: Switch) -> str:
    return sw.commit(ctx)


def prune_releases(ctx: Context, sw: Switch) -> str | None:
    """Only once a switch committed is the rollback target known for sure: releases outside it and
    engine.keep_releases can go."""
    removed = prune(ctx.layout, ctx.spec.engine.keep_releases, ctx.state.releases_in_use())
    return f"removed old release(s) {', '.join(removed)}" if removed else None


def expose_target(ctx: Context, sw: Switch) -> None:
    """A revert: the slot the front door pointed at before the switch: held requests go there again."""
    expose(ctx, sw.target)


def retire_candidate(ctx: Context, sw: Switch) -> None:
    """A revert beside last good, which never stopped and still has the front door: the candidate goes."""
    ctx.say(f"stopping {sw.candidate.program}: {ctx.spec.server.name} on last good release "
            f"{ctx.state.last_good.release} kept serving")
    _retire_candidate(ctx, sw)
    sw.start = None  # the probe that proves last good watches its own engine from now


def _await_memory(ctx: Context) -> None:
    """The new engine starts only into memory that is back (service/memory_back.py); model.memory_budget: warn
    says the numbers and goes on, as its plan did. Memory that is back is the end of the old engine's stop, so
    server.stop_wait_s bounds the wait too (at most memory_back.MEMORY_BACK_S)."""
    needed = _memory_needed(ctx)
    if needed is not None:
        memory_back.wait_until_back(needed, say=ctx.say, bound_s=_memory_back_s(ctx))


def _memory_needed(ctx: Context) -> int | None:
    """What MemAvailable must hold before a new engine starts (None: model.memory_budget warn, or not known)."""
    if ctx.memory is None or ctx.spec.model.memory_budget != "enforce":
        return None
    return ctx.memory.estimate.peak + memory_back.FREE_RESERVE_BYTES


def _memory_back_s(ctx: Context) -> float:
    return min(memory_back.MEMORY_BACK_S, float(ctx.spec.server.stop_wait_s))


@dataclass(frozen=True)
class Flip:
    """The held road's clients went to the new engine before its soak (front.flip: after-smoke)."""

    port: int  # the new engine's slot
    answered_before: int | None  # what HAProxy had counted as answered there before (None: not known)


def flip_before_soak(ctx: Context, sw: Switch) -> Flip | None:
    """The held road, once the new engine answered right (the smoke plain and streamed, the tool call, the gate):
    held requests go to it now, and the soak goes on while it serves. None where this switch does not flip
    early: no front door, front.flip after-soak, the beside road (its candidate serves no one until commit), or
    no last good to revert to. A crash from here is reverted as before (:func:`hold_after_flip`, then
    :func:`revert`); a run that dies meanwhile is the guard's, which points the front door at last good again."""
    last_good, current = ctx.state.last_good, ctx.state.current
    if (not front.enabled(ctx) or ctx.spec.front.flip != "after-smoke" or not sw.begun
            or sw.candidate is not None or last_good is None or current is None or not front.running(ctx)):
        return None
    port = front.port_of(current)
    before = _answered(ctx, port)
    front.point_at(ctx, port)
    crash_point("held-flipped")
    ctx.say(f"front door: clients go to release {current.release} on 127.0.0.1:{port} now; the "
            f"{ctx.spec.health.soak_s:g}s soak goes on while it serves (front.flip: after-smoke)")
    return Flip(port, before)


def hold_after_flip(ctx: Context, flip: Flip) -> str:
    """The new engine failed its soak after clients were sent to it: hold what arrives again (HAProxy re-sends a
    request the dying engine never answered), and say how many it answered meanwhile, for the report."""
    after = _answered(ctx, flip.port)
    front.hold(ctx)
    if flip.answered_before is None or after is None:
        return "it had served clients since its smoke (how many, HAProxy's stats did not say)"
    return f"it had answered {after - flip.answered_before} client request(s) since its smoke"


def held_for(ctx: Context, release: str) -> str:
    """For the plan: how long a request that arrives during this switch is held, with the numbers. Held from
    the moment the serving engine takes no new request (the drain's start) until the new one answered its probe
    up to the flip (service/switch.py flip_before_soak), or its whole probe (front.flip: after-soak)."""
    spec = ctx.spec
    parts = [f"the drain of what is in flight (at most server.drain_s {spec.server.drain_s:g}s)", "the stop"]
    measured = next((d for d in reversed(ctx.state.good) if d.release == release and d.load_s is not None), None)
    guess = ctx.state.last_good if ctx.state.last_good and ctx.state.last_good.load_s is not None else None
    if measured is not None:
        parts.append(f"the load and the smoke ({measured.load_s:g}s at release {release}'s last start here)")
    elif guess is not None:
        parts.append(f"the load and the smoke (release {release} has not started here yet; last good "
                     f"{guess.release} took {guess.load_s:g}s)")
    else:
        parts.append("the load and the smoke (not measured here yet)")
    if spec.health.tool_call:
        parts.append("the tool call")
    if spec.health.max_regression is not None or spec.health.min_decode_tps is not None:
        parts.append("the performance gate's benches (the old engine's too, after its drain: each engine is "
                     "benched alone)")
    if spec.front.flip == "after-soak" or ctx.state.last_good is None:
        why = "front.flip: after-soak" if ctx.state.last_good else "no last good to revert to: a first start"
        parts.append(f"the {spec.health.soak_s:g}s soak ({why})")
        tail = ""
    else:
        tail = f"; the {spec.health.soak_s:g}s soak goes on while it serves (front.flip: after-smoke)"
    return f"requests are held for {', '.join(parts[:-1])} and {parts[-1]}{tail}"


def _answered(ctx: Context, port: int) -> int | None:
    try:
        found = front.slot_counters(ctx.layout, ctx.spec.server.name, port)
    except (OSError, front.FrontError):
        return None
    return found.answered if found else None


def _retire_candidate(ctx: Context, sw: Switch) -> None:
    """The candidate's work is done (it passed and clients moved back, or it failed): drained when it served
    clients, stopped, and gone from supervisord and its program directory."""
    candidate, program = sw.candidate, sw.candidate.program
    grace = UNPROVEN_STOP_GRACE_S
    if not candidate.under_probe and answers(candidate.deployment.endpoint):
        drain.wait_idle(candidate.deployment.endpoint, ctx.spec.server.drain_s, say=ctx.say)
        grace = stop_grace(ctx.spec)
    ctx.supervisor.stop(program, grace=grace)
    ctx.supervisor.remove(program)
    ctx.layout.program_conf(program).unlink(missing_ok=True)
    sw.candidate = None


def watched(ctx: Context) -> bool:
    """The watchdog watches this spec's engine (a distributed worker has no HTTP API to ask)."""
    d = ctx.spec.distributed
    return ctx.spec.health.watchdog.enabled and not (d is not None and d.worker)


def watch_last_good(ctx: Context) -> None:
    """From a commit on, the watchdog watches the engine just proven (service/watchdog.py)."""
    watchdog.write_settings(ctx.layout, _watch_settings(ctx))


def watch_text(ctx: Context) -> str | None:
    """What watch_last_good would write (None: no file), for a plan to compare."""
    settings = _watch_settings(ctx)
    return watchdog.settings_text(settings) if settings else None


def _watch_settings(ctx: Context):
    if not watched(ctx):
        return None
    # a restart waits for the memory as a switch does
    return watchdog.Settings.of(ctx.spec, verdict_endpoint(ctx), MODEL_ID, memory_needed=_memory_needed(ctx),
                                memory_back_s=_memory_back_s(ctx))


def verdict_endpoint(ctx: Context) -> str:
    return ctx.state.last_good.endpoint if ctx.state.last_good else endpoint(ctx)


@dataclass(frozen=True)
class Revert:
    road: Road | None  # the road back: last good, started again exactly as it ran; the caller proves it answers
    note: str = ""  # when there is none: why, for the report


def revert(ctx: Context, sw: Switch) -> Revert:
    """The road back to last good exactly as it ran (stored config, no re-render). With no last good (a first
    install) the unproven engine is stopped here; when last good is the very config that failed there is nothing
    to go to. Raises what talking to supervisord raises: the caller reports it with :func:`serving`."""
    name, last_good, failed = ctx.spec.server.name, ctx.state.last_good, ctx.desired
    sw.phase, sw.target = "reverted", last_good
    if sw.probed is not None:
        return Revert(REVERT_BESIDE)  # beside last good, which never stopped: the candidate goes, nothing else
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
    return Revert(REVERT)


def running_pid(ctx: Context, *, starting: bool = False) -> int | None:
    """The engine's PID under this root's supervisord; None when it or supervisord does not run (`starting`: an
    engine supervisord still calls STARTING counts as running)."""
    if not ctx.supervisor.is_running():
        return None
    return ctx.supervisor.running_pid(ctx.spec.server.name, starting=starting)


def recover_stale(ctx: Context) -> str | None:
    """For a run, under its lock, before it plans: a switch whose run died and that no guard repaired."""
    return guard.recover_stale(ctx.layout)


def settle(ctx: Context, sw: Switch) -> None:
    """The switch is settled (proven, reverted, or reported as failed with what serves): the guard stands down,
    and a candidate still beside it is retired, unless it is all that answers (the next run decides then)."""
    current, candidate = ctx.state.current, sw.candidate
    if candidate is not None and current is not None and answers(current.endpoint):
        try:
            _retire_candidate(ctx, sw)
        except (OSError, xmlrpc.client.Error, Ds4Error) as exc:  # settling never fails the run's report
            ctx.say(f"warning: {candidate.program} could not be stopped ({exc}); the next run removes it")
    guard.disarm(ctx.layout)


def expose(ctx: Context, deployment: Deployment, candidate: Deployment | None = None) -> None:
    """A proven deployment is what clients reach: the front door points at its slot (no front: it already is).
    `candidate`: the engine beside it, still listening on its own slot."""
    port = front.port_of(deployment)
    if front.enabled(ctx) and port in front.slots(ctx):
        front.point_at(ctx, port, candidate)


def serving(ctx: Context) -> str:
    """What runs under this root right now, in words, for a report after things went wrong (service/snapshot.py)."""
    return snapshot.read(ctx.layout, ctx.supervisor, ctx.spec, ctx.state, front=False).serving_words()
