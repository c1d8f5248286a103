"""After the old engine stops, before the new one starts: wait (bounded) until its memory is back.

The process group is gone when supervisor.stop returns, but on a GB10 the driver and the kernel give its memory
back a little later (pinned pages unpinned, device memory freed, page cache of a private mapping dropped). A new
engine started into memory that is not back yet is the over-commit that can freeze the host, so the switch waits
for MemAvailable to hold what the memory budget said the new engine takes (models.budget: its peak, plus the
reserve kept free), and fails the switch (which reverts) when it does not come back in time.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from ds4_converge.core.plan import RoleFailed
from ds4_converge.facts.memory import parse_meminfo
from ds4_converge.core.memory_fit import FREE_RESERVE_BYTES  # noqa: F401 - the reserve the switch adds, as the budget does
from ds4_converge.units import gib

MEMORY_BACK_S = 60.0  # a driver frees an 80 GiB mapping in seconds; a minute that is not enough is a leak
POLL_S = 0.5


def available_now(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    try:
        return parse_meminfo(meminfo.read_text()).available_bytes
    except (OSError, ValueError):
        return None


def wait_until_back(needed: int, *, bound_s: float = MEMORY_BACK_S, available: Callable[[], int | None] = available_now,
                    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], object] = time.sleep,
                    say: Callable[[str], object] = print) -> int | None:
    """Return MemAvailable once it holds `needed` bytes (None: not known here, nothing to wait for); raise
    RoleFailed with the numbers when it does not within `bound_s`."""
    now = available()
    if now is None or now >= needed:
        return now
    say(f"waiting up to {bound_s:.0f}s for the old engine's memory to come back: {gib(now)} available, "
        f"{gib(needed)} needed")
    began = clock()
    end = began + bound_s
    while clock() < end:
        sleep(POLL_S)
        now = available()
        if now is None or now >= needed:
            if now is not None:
                say(f"the old engine's memory is back after {clock() - began:.1f}s: {gib(now)} available")
            return now
    raise RoleFailed(f"the old engine's memory did not come back: {gib(now)} available after {bound_s:.0f}s, the "
                     f"new engine needs {gib(needed)} (the memory budget's peak and its reserve); not starting it")
