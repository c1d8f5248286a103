"""Preflight role: host traps found from facts before anything is built, stopped or started.

It applies :mod:`ds4_converge.preflight.rules` to the facts the reconciler gathered (``ctx.facts``); any error
finding stops the run before a single change. It never plans a change itself.
"""
from __future__ import annotations

from ds4_converge.core import root_trust
from ds4_converge.core.context import Context
from ds4_converge.core.plan import Finding, RolePlan
from ds4_converge.health import warmup
from ds4_converge.models.placement import placements
from ds4_converge.preflight import front, rules
from ds4_converge.preflight.host_paths import service_identity, writable_dir_findings
from ds4_converge.preflight.scope import model_bytes_needed
from ds4_converge.units import GIB, MIB

NAME = "preflight"


def _has_releases(ctx: Context) -> bool:
    try:
        return any(p.is_dir() and not p.name.startswith(".") for p in ctx.layout.releases.iterdir())
    except OSError:
        return False


def plan(ctx: Context) -> RolePlan:
    spec, host = ctx.spec, ctx.facts
    paths, _ = rules.expand_paths(spec, ctx.host_path)
    files = placements(spec.model, ctx.host_path, ctx.layout.models)
    kv_dir = paths.get("server.kv_disk_dir")
    disk = rules.disk_needs(
        host, build_certain=not _has_releases(ctx), model_bytes_needed=model_bytes_needed(files),
        kv_dir=str(kv_dir) if kv_dir else None,
        kv_bytes=(spec.server.kv_disk_space_mb or rules.DEFAULT_KV_DISK_MB) * MIB if kv_dir else 0)
    cuda_home = paths.get("toolchain.cuda_home")
    # a port holder is ours when it runs under our supervisord: ask only when someone holds the port
    holders = {l.pid for l in host.listeners if l.pid}
    if host.supervised_pids is not None:  # facts captured on the target, with what its supervisord runs
        ours = holders & set(host.supervised_pids)
    else:
        ours = ctx.supervisor.owns(holders) if holders else set()
    untrusted = root_trust.problems(ctx.layout)
    if root_trust.read_only(ctx.layout):
        disk = [need for need in disk if need.path != host.root]  # its free space is beside the point
    findings = rules.all_findings(spec, host, expand=ctx.host_path, our_pids=ours,
                                  cuda_home=str(cuda_home) if cuda_home else None, disk=disk)
    findings += [Finding("error", problem) for problem in untrusted]
    if kv_dir and not ctx.facts_elsewhere:  # a path on this host, not on the host the facts were captured on
        findings += writable_dir_findings("server.kv_disk_dir", kv_dir,
                                          *service_identity(host.service_user, host.service_passwd))
    findings += [Finding("error", problem) for problem in warmup.problems(
        {field: path for field, path in paths.items() if field.startswith("health.warmup[")}, spec.server.ctx)]
    findings += front.findings(ctx)
    errors = sum(f.level == "error" for f in findings)
    warnings = sum(f.level == "warning" for f in findings)
    gpu = f"{host.gpus[0].name} ({host.gpus[0].compute_cap})" if host.gpus else "no GPU"
    summary = f"{host.arch or 'unknown arch'}, {gpu}"
    if host.memory:
        summary += f", {host.memory.total_bytes / GIB:.0f} GiB RAM"
    if errors:
        reason = f"{errors} host problem(s) must be fixed first ({summary})"
    else:
        reason = f"host checks passed ({summary})" + (f", {warnings} warning(s)" if warnings else "")
    return RolePlan(NAME, reason=reason, findings=findings)
