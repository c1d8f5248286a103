"""Will the engine fit in memory: the values the roles share about it (models judges, engine, service and health
read). The arithmetic that makes them is the models role's (:mod:`ds4_converge.models.budget`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ds4_converge.units import GIB

OS_HEADROOM_BYTES = 8 * GIB
# left free of what MemAvailable says: the fork's --mem-floor-gb default (admissions leave 4 GB free)
FREE_RESERVE_BYTES = 4 * GIB
# the engine flag that serves a model larger than memory by streaming its weights from SSD (b030961 has it, on
# Metal/CUDA/ROCm; 8d57664 does not): named to the user only where the release's --help lists it
SSD_STREAMING = "--ssd-streaming"


@dataclass(frozen=True)
class Budget:
    ctx: int
    weights: int
    kv: int          # context buffers: KV cache + scratch
    kv_cache: int    # the KV cache alone (raw + compressed rows), what the managed threshold applies to
    drafter: int
    total: int
    kv_managed: bool      # the KV cache alone reaches the engine's managed-memory threshold
    managed_threshold: int
    load_margin: int = 0  # more than `total`, held for a while during the load (unified memory), then returned
    device_copies: int = 0  # in `total`: tensors the engine also keeps as device copies (integrated GPU)

    @property
    def peak(self) -> int:
        return self.total + self.load_margin


@dataclass(frozen=True)
class Room:
    """What the model set may take: the host's memory, and what is free now."""

    total: int                    # MemTotal
    available: int | None = None  # MemAvailable (None: an old kernel, or not known)
    returned: int = 0             # what the serving engine gives back when the switch stops it
    headroom: int = OS_HEADROOM_BYTES
    reserve: int = FREE_RESERVE_BYTES

    @property
    def usable(self) -> int:
        return self.total - self.headroom

    @property
    def free(self) -> int | None:
        """What a new engine can take once the old one is gone; None when MemAvailable is unknown."""
        if self.available is None:
            return None
        return self.available + self.returned - self.reserve


@dataclass(frozen=True)
class MemoryFit:
    """What the models role judged: the engine's expected take against the room it has."""

    estimate: Budget  # what the engine is expected to take
    room: Room        # what it was judged against
    short: str | None = None  # it does not fit and model.memory_budget is warn: why (the run goes on)


def streaming_hint(flags) -> str | None:
    """What a release whose --help lists --ssd-streaming offers for a model that does not fit (None: nothing)."""
    if SSD_STREAMING not in flags:
        return None
    return (f"the model set does not fit in memory (see models); this build has {SSD_STREAMING}, which streams "
            f"the weights from SSD instead of keeping them all resident (Metal/CUDA/ROCm): add it to "
            f"server.extra_args")
