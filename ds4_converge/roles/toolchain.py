"""Toolchain role: which nvcc/CUDA_HOME builds the engine, and what the service needs to run its binary."""
from __future__ import annotations

from ..context import Context
from ..plan import RolePlan
from ..release import Toolkit

NAME = "toolchain"


def plan(ctx: Context) -> RolePlan:
    ctx.toolkit = Toolkit()
    return RolePlan(NAME, reason="cpu build: no CUDA toolkit needed" if ctx.spec.engine.target == "cpu"
                    else "toolkit selection pending")


def apply(ctx: Context, plan: RolePlan) -> str:
    return "nothing to change"
