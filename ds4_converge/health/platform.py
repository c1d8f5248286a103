"""Is the platform itself slow? The GPU as it was while a bench ran: clocks, power, p-state, throttle reasons and
other processes on it (facts/gpu.py), sampled during the bench, so that a slow box is not blamed on a release.

A GB10 can be stuck in a low power state (its clocks never boost until AC power is removed), another tenant can
hold the GPU, a power cap or a thermal slowdown can hold the clocks down: each makes a good release bench slow.
"""
from __future__ import annotations

import threading
from statistics import median

from ds4_converge.facts.base import FactRunner, gather
from ds4_converge.facts.gpu import SLOWDOWN_REASONS, NvidiaClocks, NvidiaComputeApps

SAMPLE_EVERY_S = 1.0
# the SM clock, while the GPU works, below this fraction of its maximum is a platform held down
CLOCK_FLOOR = 0.8


class Sampler:
    """Samples the GPU's clocks and compute processes in a thread while a bench runs (no GPU: no samples)."""

    def __init__(self, runner: FactRunner | None = None, every_s: float = SAMPLE_EVERY_S):
        self.runner, self.every_s = runner or FactRunner(timeout=5), every_s
        self.clocks: list[list[dict]] = []
        self.processes: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.every_s):
                return

    def sample(self) -> None:
        clocks = gather(NvidiaClocks(), self.runner)
        if clocks:
            self.clocks.append([c.model_dump() for c in clocks])
        for process in gather(NvidiaComputeApps(), self.runner):
            self.processes[process.pid] = process.name

    def record(self) -> dict | None:
        """What the bench record keeps (None: no GPU was seen)."""
        if not self.clocks and not self.processes:
            return None
        return {"samples": self.clocks, "gpu_processes": [{"pid": p, "name": n} for p, n in self.processes.items()]}


def gpus(platform: dict | None) -> list[dict]:
    """Pure: per GPU seen during the bench, its index, the slowdown reasons seen ([]: none) and the median SM
    clock while working as a fraction of its maximum (None: never seen working): the platform facts the
    performance gate reads, and the fleet textfile exports."""
    by_gpu: dict[int, list[dict]] = {}
    for sample in (platform or {}).get("samples") or []:
        for gpu in sample:
            by_gpu.setdefault(gpu["index"], []).append(gpu)
    found = []
    for index, seen in sorted(by_gpu.items()):
        slowdowns = sorted({r for g in seen for r in g.get("reasons") or [] if r in SLOWDOWN_REASONS})
        busy = [g for g in seen if "idle" not in (g.get("reasons") or []) and g.get("sm_mhz") and g.get("max_sm_mhz")]
        clock = top = None
        if busy:
            clock, top = median(g["sm_mhz"] for g in busy), max(g["max_sm_mhz"] for g in busy)
        found.append({"index": index, "slowdowns": slowdowns, "sm_mhz": clock, "max_sm_mhz": top,
                      "sm_clock_ratio": round(clock / top, 3) if busy else None,
                      "pstates": sorted({g["pstate"] for g in busy if g.get("pstate")})})
    return found


def slow_reasons(platform: dict | None, ours: set[int] = frozenset()) -> list[str]:
    """Pure: why the platform itself was slow during the bench, in words ([]: it was not, or nothing is known).
    `ours`: the engine's PIDs (its process group), which are no tenant."""
    if not platform:
        return []
    reasons: list[str] = []
    for gpu in gpus(platform):
        index = gpu["index"]
        if gpu["slowdowns"]:
            reasons.append(f"GPU {index}: {', '.join(gpu['slowdowns'])}")
        if gpu["sm_clock_ratio"] is not None and gpu["sm_mhz"] < CLOCK_FLOOR * gpu["max_sm_mhz"]:
            states = gpu["pstates"]
            reasons.append(f"GPU {index}: SM clock {gpu['sm_mhz']:.0f} of its {gpu['max_sm_mhz']:.0f} MHz while working"
                           + (f" (p-state {', '.join(states)})" if states else ""))
    tenants = [p for p in platform.get("gpu_processes") or [] if p["pid"] not in ours]
    if tenants:
        reasons.append("another process on the GPU: " + ", ".join(f"pid {p['pid']} ({p['name']})" for p in tenants))
    return reasons
