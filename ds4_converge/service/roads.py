"""The roads a switch takes, each a sequence of named steps, the way pyinfra composes an operation of named ones.

A road is data: the steps it runs, in order, and the crash point each step ends at (core/crashpoints.py). The
service role's plan picks one (service/role.py), `--check` prints it, and one executor runs it
(orchestrate/roads.py): the steps before "probe" when the service role applies, the probe as the probe role, the
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
