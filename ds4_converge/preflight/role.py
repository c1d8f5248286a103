"""Preflight role: host traps found from facts before anything is built, stopped or started.

It gathers the host facts once per run (``ctx.facts``) and applies :mod:`ds4_converge.preflight.rules`; any
error finding stops the run before a single change. It never changes anything itself.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ds4_converge.preflight import rules
from ds4_converge.core.context import Context
from ds4_converge.spec.hostpaths import UnknownVariable
from ds4_converge.facts import HostFacts, gather_host_facts
from ds4_converge.core.plan import RolePlan
from ds4_converge.models import role as models
from ds4_converge.service.role import managed_pids

NAME = "preflight"
MODEL_ROLES = ("main", "mtp", "dspark")


def facts(ctx: Context) -> HostFacts:
    """The run's host facts, gathered on first use (read-only commands: safe in check mode)."""
    if ctx.facts is None:
        spec = ctx.spec
        paths, _ = rules.expand_paths(spec, ctx.host_path)  # unknown variables are reported by plan()
        globs = [str(paths[f"toolchain.search[{i}]"]) for i in range(len(spec.toolchain.search))
                 if f"toolchain.search[{i}]" in paths]
        if "toolchain.cuda_home" in paths:
            globs.append(str(paths["toolchain.cuda_home"]))
        link = str(paths.get("toolchain.cuda_link", spec.toolchain.cuda_link))
        dirs = [str(f.target.parent) for f in model_files(ctx, paths) if f.target is not None]
        if "server.kv_disk_dir" in paths:
            dirs.append(str(paths["server.kv_disk_dir"]))
        ctx.facts = gather_host_facts(port=spec.server.port, model_dirs=list(dict.fromkeys(dirs)),
                                      root=str(ctx.layout.root), service_user=spec.server.user,
                                      cuda_globs=globs, cuda_link=link)
    return ctx.facts


@dataclass(frozen=True)
class ModelFileAt:
    """One spec model file: where the engine will read it and, when it is fetched or copied there, from where."""

    role: str
    target: Path | None  # None: a path field did not expand (reported as an error finding)
    local_source: Path | None  # a local source file (used in place, or copied into dest)
    fetch: bool
    declared_size: int | None


def model_files(ctx: Context, paths: dict[str, Path]) -> list[ModelFileAt]:
    """The models role's placement (models.place); a path that does not expand is None here (its own error)."""
    out = []
    for role in MODEL_ROLES:
        entry = getattr(ctx.spec.model, role)
        if entry is None:
            continue
        try:
            target, fetch = models.place(entry, ctx.host_path, ctx.layout.models)
        except UnknownVariable:
            target, fetch = None, not (models.is_local(entry) and entry.dest is None)
        local = paths.get(f"model.{role}") if models.is_local(entry) else None
        out.append(ModelFileAt(role, target, local, fetch, entry.size))
    return out


def _size(path: Path | None) -> int | None:
    try:
        return path.stat().st_size if path is not None and path.is_file() else None
    except OSError:
        return None


def model_bytes_needed(files: list[ModelFileAt]) -> dict[str, int]:
    """Bytes still to be written per dir. Seam for the models role: sizes known here are a local source's own
    size and ``model.X.size``; a remote file of unknown size needs what the models role learns from the remote."""
    needed: dict[str, int] = {}
    for f in files:
        if not f.fetch or f.target is None:
            continue
        size = _size(f.local_source) or f.declared_size
        have = _size(f.target) or 0
        if size is not None and have < size:
            key = str(f.target.parent)
            needed[key] = needed.get(key, 0) + size - have
    return needed


def _has_releases(ctx: Context) -> bool:
    try:
        return any(p.is_dir() and not p.name.startswith(".") for p in ctx.layout.releases.iterdir())
    except OSError:
        return False


def plan(ctx: Context) -> RolePlan:
    spec = ctx.spec
    host = facts(ctx)
    paths, _ = rules.expand_paths(spec, ctx.host_path)
    files = model_files(ctx, paths)
    kv_dir = paths.get("server.kv_disk_dir")
    disk = rules.disk_needs(
        host, build_certain=not _has_releases(ctx), model_bytes_needed=model_bytes_needed(files),
        kv_dir=str(kv_dir) if kv_dir else None,
        kv_bytes=(spec.server.kv_disk_space_mb or rules.DEFAULT_KV_DISK_MB) * rules.MIB if kv_dir else 0)
    cuda_home = paths.get("toolchain.cuda_home")
    findings = rules.all_findings(spec, host, expand=ctx.host_path, our_pids=managed_pids(ctx),
                                  cuda_home=str(cuda_home) if cuda_home else None, disk=disk)
    errors = sum(f.level == "error" for f in findings)
    warnings = sum(f.level == "warning" for f in findings)
    gpu = f"{host.gpus[0].name} ({host.gpus[0].compute_cap})" if host.gpus else "no GPU"
    summary = f"{host.arch or 'unknown arch'}, {gpu}"
    if host.memory:
        summary += f", {host.memory.total_bytes / rules.GIB:.0f} GiB RAM"
    if errors:
        reason = f"{errors} host problem(s) must be fixed first ({summary})"
    else:
        reason = f"host checks passed ({summary})" + (f", {warnings} warning(s)" if warnings else "")
    return RolePlan(NAME, reason=reason, findings=findings)


def apply(ctx: Context, plan: RolePlan) -> str:
    return "nothing to change"

