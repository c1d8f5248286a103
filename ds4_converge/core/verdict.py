"""The probe's verdict: a ground value the health role makes and the service's switch commits."""
from __future__ import annotations

from dataclasses import dataclass

from ds4_converge.core.state import Deployment


@dataclass(frozen=True)
class Verdict:
    """This deployment passed the whole probe (the switch commits it)."""

    deployment: Deployment
    pid: int | None
    bench: dict | None = None  # the performance gate's measurement, recorded with last good
    load_s: float | None = None  # from its start to its smoke answered: how long a held client waits for it
