"""Model files role: the exact files the engine loads, present and verified before it starts."""
from __future__ import annotations

from ..context import Context
from ..plan import RoleFailed, RolePlan
from ..server_args import ModelPaths

NAME = "models"


def plan(ctx: Context) -> RolePlan:
    model = ctx.spec.model
    paths = {}
    for role in ("main", "mtp", "dspark"):
        entry = getattr(model, role)
        if entry is None:
            continue
        path = ctx.host_path(entry.source)
        if not path.is_file():
            raise RoleFailed(f"model.{role}: {path} does not exist")
        paths[role] = path
    ctx.models = ModelPaths(**paths)
    return RolePlan(NAME, reason=f"{len(paths)} model file(s) present")


def apply(ctx: Context, plan: RolePlan) -> str:
    return "nothing to do"
