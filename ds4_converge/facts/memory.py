"""Memory: ``MemTotal``, ``MemAvailable`` and swap from ``/proc/meminfo``, in bytes.

On DGX Spark (GB10) CPU and GPU share this memory, so these numbers bound the model too. ``MemAvailable`` is what
the kernel can hand a new program without swapping (free memory plus the page cache it may drop): what other
programs hold is not in it, which is why the memory budget judges against it rather than against ``MemTotal``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ds4_converge.facts.base import Fact, FactParseError, FrozenModel

_UNITS = {"kB": 1024, "": 1}


class MemoryInfo(FrozenModel):
    total_bytes: int
    #: ``None`` on kernels older than 3.14 (no ``MemAvailable`` line).
    available_bytes: int | None = None
    #: ``SwapTotal`` / ``SwapFree``; ``None`` when the lines are missing.
    swap_total_bytes: int | None = None
    swap_free_bytes: int | None = None


def parse_meminfo(stdout: str) -> MemoryInfo:
    """``/proc/meminfo`` text -> :class:`MemoryInfo`; requires a ``MemTotal`` line."""
    values: dict[str, int] = {}
    for line in stdout.splitlines():
        key, sep, rest = line.partition(":")
        if not sep:
            continue
        parts = rest.split()
        if not parts or not parts[0].isdigit():
            continue
        unit = parts[1] if len(parts) > 1 else ""
        if unit not in _UNITS:
            continue
        values[key.strip()] = int(parts[0]) * _UNITS[unit]
    if "MemTotal" not in values:
        raise FactParseError("no MemTotal line in /proc/meminfo output")
    return MemoryInfo(total_bytes=values["MemTotal"], available_bytes=values.get("MemAvailable"),
                      swap_total_bytes=values.get("SwapTotal"), swap_free_bytes=values.get("SwapFree"))


@dataclass(frozen=True)
class Memory(Fact[MemoryInfo | None]):
    def command(self) -> list[str]:
        return ["cat", "/proc/meminfo"]

    def parse(self, stdout: str) -> MemoryInfo:
        return parse_meminfo(stdout)
