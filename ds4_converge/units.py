"""Byte sizes for people: one way to write them everywhere (messages, tables, the memory budget)."""
from __future__ import annotations

KIB = 1024
MIB = 1024**2
GIB = 1024**3


def gib(n: int | float | None) -> str:
    """Always in GiB, one decimal: for sizes that are compared with each other in one message ('unknown': None)."""
    return "unknown" if n is None else f"{n / GIB:.1f} GiB"


def human_bytes(n: int | float) -> str:
    """The largest unit that keeps the number at 1 or more: `1.5 MiB`, `81.0 GiB`, `512 B`."""
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"
