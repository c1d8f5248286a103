"""What one start of the engine left behind: its own log lines, and how it ended.

The engine's log file is shared by every start (and rotated by supervisord), so a failure report that shows its
tail can begin with the previous, healthy engine's lines. A mark taken right before the start (both logs'
sizes) keeps only this start's lines.

How the engine ended is in supervisord's own log: `exited: ds4 (exit status 1; not expected)`. The XML-RPC
API loses it for the commonest failure, an engine that dies at start (supervisord records an exit status of
None for an exit "too quickly" and getProcessInfo reports 0), so it is read from there.
"""
from __future__ import annotations

import os
import re
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from ds4_converge.core.layout import Layout


@dataclass(frozen=True)
class StartMark:
    engine_log: Path
    engine_offset: int
    supervisord_log: Path
    supervisord_offset: int
    at: float = 0.0  # time.monotonic() at the mark: how long the start took is measured from here


def mark(layout: Layout, name: str) -> StartMark:
    """Where both logs end now: everything after this belongs to the start that follows."""
    engine, supervisord = layout.engine_log(name), layout.supervisord_log
    return StartMark(engine, _size(engine), supervisord, _size(supervisord), time.monotonic())


def engine_lines(start: StartMark, lines: int = 15) -> str:
    """The last `lines` lines this start wrote to the engine log (none of an earlier start's)."""
    return "".join(deque(_since(start.engine_log, start.engine_offset).splitlines(keepends=True), maxlen=lines))


def engine_text(start: StartMark) -> str:
    """Everything this start wrote to the engine log."""
    return _since(start.engine_log, start.engine_offset)


def exits(start: StartMark, name: str) -> list[str]:
    """How the engine ended, each time since the start: 'exit status 1', 'terminated by SIGSEGV', …"""
    pattern = re.compile(rf"\bexited: {re.escape(name)} \((.+?); (?:not )?expected\)")
    return pattern.findall(_since(start.supervisord_log, start.supervisord_offset))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _since(path: Path, offset: int) -> str:
    """The file's text after offset; all of it when it was rotated (shorter than the mark) meanwhile."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            if handle.tell() < offset:
                offset = 0
            handle.seek(offset)
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
