"""The engine of one start as supervisord and its log see it: the watch the probe is handed (health.probe's
EngineWatch), made here so that health never talks to supervisord or reads a program's log itself."""
from __future__ import annotations

import re
import shlex

from ds4_converge.core.context import Context
from ds4_converge.engine_knowledge import load as load_knowledge
from ds4_converge.service import start_log
from ds4_converge.service.start_log import StartMark
from ds4_converge.tool_command import tool_command

STAMP = re.compile(load_knowledge()["logs"]["stamp"])  # ds4-server's own lines begin with MMDD HH:MM:SS
# b030961 ends a refused start with its own summary after the engine's reason ("ds4: distributed coordinator
# sessions require the graph backend", then "ds4-server: failed to create cpu session 1/1")
SUMMARY = re.compile(r"^ds4-server: failed to create \S+ session")


def endpoint(ctx: Context) -> str:
    """Where the engine that serves answers when no switch says otherwise (the probe, drain and bench talk to it
    directly): with a front door, the slot of current (the switch records it before it starts it)."""
    if ctx.spec.front is not None:
        current = ctx.state.current
        return current.endpoint if current is not None else f"http://127.0.0.1:{ctx.spec.server.port}"
    return f"http://{ctx.spec.server.host}:{ctx.spec.server.port}"


class Watch:
    """One supervisord program of this root since a start mark (no mark: a start by someone else)."""

    def __init__(self, ctx: Context, program: str, start: StartMark | None = None):
        self.ctx, self.name = ctx, program
        self.start = start or start_log.mark(ctx.layout, program)

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
