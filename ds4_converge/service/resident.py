"""What the tool's own resident programs under supervisord share (the switch guard, service/guard.py, and the
watchdog, service/watchdog.py): one time-stamped line per event on their output, which supervisord keeps as
their log, and a main that takes the root and watches it until supervisord stops them."""
from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from ds4_converge.core.layout import Layout


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def log(message: str) -> None:
    print(f"{now_iso()} {message}", flush=True)


def main(argv: list[str], module: str, watch: Callable[[Layout], None], watching: Callable[[Layout], str]) -> int:
    """`python -m MODULE ROOT`: says what it watches (`watching`), then watches the root (`watch`)."""
    if len(argv) != 1:
        sys.stderr.write(f"usage: python -m {module} ROOT\n")
        return 2
    layout = Layout(Path(argv[0]))
    log(watching(layout))
    watch(layout)
    return 0
