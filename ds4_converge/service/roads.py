"""The roads a switch takes, each a sequence of named steps, the way pyinfra composes an operation of named ones.

A road is data: the steps it runs, in order, and the crash point each step ends at (core/crashpoints.py). The
service role's plan picks one (service/role.py), `--check` prints it, and one executor runs it
(orchestrate/drive.py): the steps before "probe" when the service role applies, the probe as the probe role, the
rest once the probe's verdict is in. A new road is a new tuple here; a new step is a function the executor names.

The steps: `check ports` (nobody else holds the slot; the engine's lock file), `hold` (the front door holds new
requests), `drain` (the serving engine finishes what is in flight), `baseline` (with a regression gate, the old
engine benched alone), `arm guard` (the intent recorded: a run that dies from here is repaired by the guard),
`stop` (the engine that runs, drained or not), `wait for memory`, `install` (state.current and the program file),
`start` (supervisord loads it), `probe`, `flip` (clients move to the candidate), `probe again` (what a take-over
started answers), `commit` (last good recorded, the guard down) and `prune` (releases no rollback needs).
"""
from __future__ import annotations

from dataclasses import dataclass

PROBE = "probe"


@dataclass(frozen=True)
class Road:
    name: str
    steps: tuple[tuple[str, str | None], ...]  # (step, the crash point after it, or None)

    @property
    def names(self) -> list[str]:
        return [step for step, _ in self.steps]

    def words(self) -> str:
        """For the plan and --check: the road and its steps, in order."""
        return f"{self.name}: {', '.join(self.names)}"

    def before_probe(self) -> tuple[tuple[str, str | None], ...]:
        return self.steps[:self.names.index(PROBE)] if PROBE in self.names else self.steps

    def after_probe(self) -> tuple[tuple[str, str | None], ...]:
        return self.steps[self.names.index(PROBE) + 1:] if PROBE in self.names else ()


_COMMIT = (("commit", "blessed"), ("prune", None))

# supervisord is down: the new program file first, then supervisord, which starts the engine once (autostart)
COLD_START = Road("cold start", (("check ports", None), ("arm guard", "intent"), ("install", "program-written"),
                                 ("start supervisord", "new-started"), ("front door", None), (PROBE, None),
                                 *_COMMIT))
# supervisord up, no front door: the engine is drained, stopped, and started again on its new config
IN_PLACE = Road("restart in place", (("check ports", None), ("drain", None), ("baseline", None),
                                     ("arm guard", "intent"), ("stop", "old-stopped"), ("wait for memory", None),
                                     ("install", "program-written"), ("start", "new-started"), (PROBE, None),
                                     *_COMMIT))
# a front door: the same, with new requests held from before the drain until the new engine answers
HELD = Road("held switch", (("check ports", None), ("hold", None), *IN_PLACE.steps[1:]))
# a front door and memory for two engines: the candidate on the idle slot, last good serving until it passed
BESIDE = Road("beside", (("check ports", None), ("baseline", None), ("arm guard", "beside-intent"),
                         ("install candidate", None), ("start candidate", "beside-started"), (PROBE, None),
                         ("flip", "beside-flipped"), ("drain", None), ("stop old", "beside-old-stopped"),
                         ("install", "beside-program-written"), ("start", None), ("probe again", None),
                         *_COMMIT))
# a failed switch back to last good: the unproven engine stops at once, last good starts exactly as it ran
REVERT = Road("revert", (("hold", None), ("arm guard", "revert-intent"), ("stop unproven", "revert-old-stopped"),
                         ("install", "revert-program-written"), ("start", None), ("expose", None), (PROBE, None)))
# a failed candidate beside last good, which never stopped: the candidate goes, nothing else
REVERT_BESIDE = Road("revert beside", (("retire candidate", None), (PROBE, None)))
# `rollback`: to last good (or the good one before it), proven like any switch, committed without pruning
ROLLBACK = Road("rollback", (("hold", None), ("drain", None), ("arm guard", "rollback-intent"),
                             ("stop", "rollback-old-stopped"), ("install", "rollback-program-written"),
                             ("start", None), (PROBE, None), ("commit", None)))
# what runs was never proven (a run died between its start and its commit): the probe, then the commit
ADOPT = Road("adopt", ((PROBE, None), *_COMMIT))


# ----------------------------------------------------------------------------------------- the chooser
# Pure: what the plan read goes in, the road comes out (tested as a table: tests/unit/roads/*.yaml).

NO_ROOM = "memory does not hold both engines"  # overlap's answer when models/budget.py beside says no


@dataclass(frozen=True)
class Inputs:
    """What the road chooser reads; the service role's plan gathers it (service/snapshot.py, the program file on
    disk, the program it rendered, the spec's front door, the models role's memory budget)."""

    supervisord: bool  # up and answering
    pid: int | None  # the engine's, RUNNING or STARTING (None: it does not run)
    current: str | None  # the program file on disk (None: none yet)
    desired: str | None  # the program file the plan rendered (None: --check before the build)
    restarts: bool = False  # another change restarts the engine (a stale program removed)
    front: bool = False  # a front door
    overlap: str = "auto"  # front.overlap
    distributed: bool = False  # a distributed part
    last_good_serves: bool = False  # what runs is last good's config
    fits: bool | None = None  # memory for both engines (models/budget.py beside); None: the budget is not known


@dataclass(frozen=True)
class Choice:
    road: Road | None  # None: nothing to start
    change: str  # what the road's change is: "program" (the program file changes), "start", "restart", ""
    beside: bool  # the new engine loads beside the serving one (then on the idle slot, as a candidate)
    why: str  # front.overlap's answer, "" without a front door


def overlap(seen: Inputs) -> tuple[bool, str]:
    """Does a new engine load beside the serving one, and why not? Only behind a front door, on one box, with
    last good serving and memory for both; otherwise the serving engine stops first (the held road)."""
    if not seen.front:
        return False, ""
    if seen.overlap == "off":
        return False, "front.overlap is off"
    if seen.distributed:
        return False, "a distributed part"
    if seen.pid is None or not seen.last_good_serves:
        return False, "last good does not serve"
    if seen.fits is None:
        return False, "the memory budget is not known yet"
    return (True, "memory holds both engines") if seen.fits else (False, NO_ROOM)


def choose(seen: Inputs) -> Choice:
    """The road a switch takes, and its change; Choice(None, …) when nothing needs starting."""
    beside, why = overlap(seen) if seen.desired is not None else (False, "")
    stop_first = HELD if seen.front else IN_PLACE
    if not seen.supervisord:  # supervisord starts the engine once, from the new program file
        return Choice(COLD_START, "program" if seen.desired is not None else "restart", False, why)
    if seen.desired is None:  # before the build: a restart of some kind, on the road that stops first
        return Choice(stop_first, "restart", False, why)
    if seen.current != seen.desired:
        return Choice(BESIDE if beside else stop_first, "program", beside, why)
    if seen.pid is None or seen.restarts:
        return Choice(stop_first, "start" if seen.pid is None else "restart", False, why)
    return Choice(None, "", beside, why)
