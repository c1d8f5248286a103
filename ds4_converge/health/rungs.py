"""The ladder an engine climbs before it may serve: rungs run by one loop over a clock, the way kubernetes.core's
k8s/waiter.py asks its predicates over its `clock()`.

A rung is one question about the engine of this start. Its check passes (returns), says "not yet" (NotReady: asked
again after the clock's pause, until the clock's deadline) or "never" (Unhealthy: the verdict, at once). A rung that
*holds* (a soak) is asked after each pause until the clock runs out, and must pass every time.

health/probe.py builds an HTTP engine's ladder (models listed, smoke, streamed smoke, speculation, tool call, route;
then the soak), health/worker.py a distributed worker's (up or connected; then the soak). Both stand on this module
and neither imports the other's rungs. A new rung is a function of the clock that raises NotReady or Unhealthy, put
into its ladder where it belongs (probe.ladder); a new kind of engine is a new ladder beside those two.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol

from ds4_converge.errors import Ds4Error


class NotReady(Ds4Error):
    """Temporary: try again until the deadline."""


class Unhealthy(Ds4Error):
    """Permanent: revert now. `detail`: the engine's own last lines, when it died."""


class EngineWatch(Protocol):
    """What the probe asks the supervisor about the engine it started."""

    def state(self) -> tuple[str, int | None, str]:
        """(statename, pid, supervisord's spawn error or "")"""

    def exits(self) -> list[str]:
        """How the engine ended since this start, each time: 'exit status 1', 'terminated by SIGKILL'."""

    def last_lines(self) -> str:
        """This start's last log lines (never an earlier start's), and where the whole log is."""

    def last_words(self) -> str:
        """The last line this start wrote: the engine's own reason, as a rule."""

    def log_text(self) -> str:
        """Everything this start wrote to the engine's log (a distributed worker's health is read there)."""


#: how long to wait before asking again: why the rung was not there yet (a NotReady), or None while a soak holds
Pause = Callable[[NotReady | None], float]


class Clock:
    """One deadline for a climb and one pause policy between its questions."""

    def __init__(self, deadline_s: float, pause: Pause):
        self.deadline_s, self.pause, self.started = deadline_s, pause, time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def over(self) -> bool:
        return self.elapsed() >= self.deadline_s

    def timeout(self, floor: float = 30.0) -> float:
        """A one-shot rung's request timeout: what is left of the deadline, never under `floor` (an engine that
        listed its model has earned a whole answer, however late in the deadline it listed it)."""
        return max(floor, self.deadline_s - self.elapsed())

    def sleep(self, why: NotReady | None) -> None:
        """The pause, never past the deadline: the last question is asked at the deadline, not after it."""
        time.sleep(max(0.0, min(self.pause(why), self.deadline_s - self.elapsed())))


@dataclass(frozen=True)
class Rung:
    name: str  # what it asks, in words: "models listed", "smoke", "soak"
    check: Callable[[Clock], None]
    waits: bool = False  # NotReady means "not yet": asked again until the deadline (else it goes up as it is)
    late: Callable[[NotReady, Clock], Unhealthy] | None = None  # the verdict on a waiting rung late at the deadline
    holds: bool = False  # a soak: asked after each pause until the clock runs out; it must pass every time


def climb(ladder: Iterable[Rung], clock: Clock) -> None:
    """Each rung in turn, over one clock; raises the first Unhealthy (or a one-shot rung's NotReady)."""
    for rung in ladder:
        why: NotReady | None = None
        while not (rung.holds and clock.over()):  # a soak of 0 s asks nothing
            if rung.holds or why is not None:
                clock.sleep(why)
            try:
                rung.check(clock)
            except NotReady as exc:
                if not rung.waits:
                    raise
                if clock.over():
                    raise (rung.late(exc, clock) if rung.late else
                           Unhealthy(f"not ready within {clock.deadline_s:.0f}s ({exc})")) from None
                why = exc
                continue
            if not rung.holds:
                break


def alive(watch: EngineWatch) -> int | None:
    """The engine's pid while supervisord runs it (or starts it); Unhealthy, in its own words, once it ended."""
    state, pid, spawn_error = watch.state()
    if state not in ("RUNNING", "STARTING"):
        raise Unhealthy(died(state, spawn_error, watch.exits(), watch.last_words()), watch.last_lines())
    return pid


def died(state: str, spawn_error: str, ended: list[str], words: str) -> str:
    how = times(ended) if ended else "no exit recorded"
    supervisor = f"supervisord: {state}" + (f", {spawn_error}" if spawn_error else "")
    return f"ds4-server exited ({how}; {supervisor})" + (f": {words}" if words else "")


def times(ended: list[str]) -> str:
    """'exit status 1', or 'exit status 1, 2 times' when supervisord retried it."""
    last = ended[-1]
    return last if len(ended) == 1 else f"{last}, {len(ended)} times"
