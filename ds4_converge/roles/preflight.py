"""Preflight role: host traps found from facts before anything is built, stopped or started."""
from __future__ import annotations

from ..context import Context
from ..plan import RolePlan

NAME = "preflight"


def plan(ctx: Context) -> RolePlan:
    return RolePlan(NAME, reason="no host checks failed")


def apply(ctx: Context, plan: RolePlan) -> str:
    return "nothing to change"
