"""Model files role: the exact files the engine loads, downloaded, verified and identified before it starts.

No globs, no partial files, no "ls *.gguf | head -1": each file is named, its size and sha256 are checked
(cached by inode and mtime, so a converged box does not rehash 80 GB), and its GGUF identity must match its
role before any engine is stopped.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ds4_converge.models import download
from ds4_converge.core.context import Context
from ds4_converge.models.digests import DigestCache
from ds4_converge.models.gguf import check_model_set, identify
from ds4_converge.models.budget import estimate, judge
from ds4_converge.spec.sources import LocalSource, parse_source
from ds4_converge.core.plan import Change, Finding, RoleFailed, RolePlan
from ds4_converge.engine.server_args import ModelPaths
from ds4_converge.spec.model import ModelFile

NAME = "models"
ROLES = ("main", "mtp", "dspark")


@dataclass(frozen=True)
class Wanted:
    role: str
    entry: ModelFile
    path: Path  # where the engine will read it
    fetch: bool  # it comes from a source into `path` (else it is used where it is)


def is_local(entry: ModelFile) -> bool:
    return isinstance(parse_source(entry.source), LocalSource)


def place(entry: ModelFile, expand: Callable[[str], Path], models_dir: Path) -> tuple[Path, bool]:
    """(where the engine reads it, whether it is fetched there): a local source without dest is used where it
    is; everything else lands in dest (default ROOT/models) under its own file name."""
    if is_local(entry) and entry.dest is None:
        return expand(entry.source), False
    directory = expand(entry.dest) if entry.dest else models_dir
    return directory / parse_source(entry.source).name, True


def wanted_files(ctx: Context) -> list[Wanted]:
    found = []
    for role in ROLES:
        entry: ModelFile | None = getattr(ctx.spec.model, role)
        if entry is not None:
            found.append(Wanted(role, entry, *place(entry, ctx.host_path, ctx.layout.models)))
    return found


class _ReadOnlyDigests(DigestCache):
    """Check mode trusts what earlier runs verified but writes nothing."""

    def remember(self, path, sha256) -> None:
        pass


def digest_cache(ctx: Context, *, read_only: bool = False) -> DigestCache:
    return (_ReadOnlyDigests if read_only else DigestCache)(ctx.layout.cache / "digests.json")


def _in_use(ctx: Context) -> set[str]:
    deployments = (ctx.state.current, *ctx.state.good)
    return {f for d in deployments if d for f in d.model_files}


def plan(ctx: Context) -> RolePlan:
    changes, findings, reasons = [], [], []
    cache = digest_cache(ctx, read_only=ctx.check)
    for want in wanted_files(ctx):
        ok, why, _ = download.check_in_place(want.path, sha256=want.entry.sha256, size=want.entry.size, cache=cache)
        if ok:
            reasons.append(f"{want.role}: {why}")
            continue
        if not want.fetch:
            raise RoleFailed(f"model.{want.role}: {want.path}: {why}; the file was not used")
        if want.path.exists() and str(want.path) in _in_use(ctx):
            raise RoleFailed(f"model.{want.role}: {want.path} is used by a serving or last-good release and {why}; "
                             "download the new file under another name instead of overwriting it")
        size = f" ({download.human_bytes(want.entry.size)})" if want.entry.size else ""
        changes.append(Change(f"download model.{want.role} {parse_source(want.entry.source)} → {want.path}{size}",
                              after=f"{want.path}: {why}\n"))
    ctx.models = ModelPaths(**{w.role: w.path for w in wanted_files(ctx)})
    findings += identity_findings(ctx) + budget_findings(ctx)
    changes += removal_changes(ctx)
    reason = "; ".join(reasons) if not changes else f"{len(changes)} model file change(s)"
    return RolePlan(NAME, changes, reason=reason, findings=findings)


def identity_findings(ctx: Context) -> list[Finding]:
    """What each present file is; a drafter as the main model or a 0731 base with the legacy MTP is refused."""
    paths = {role: getattr(ctx.models, role) for role in ROLES}
    if not all(p is None or p.is_file() for p in paths.values()):
        return [Finding("info", "GGUF identity is checked once the files are downloaded")]
    identities = {role: identify(p) if p else None for role, p in paths.items()}
    return [Finding("error", message) for message in check_model_set(
        identities["main"], mtp=identities["mtp"], dspark=identities["dspark"])]


def budget_findings(ctx: Context) -> list[Finding]:
    """Weights + KV for ctx + drafter against host RAM, with the numbers, whatever the verdict."""
    speculative = ctx.spec.server.speculative.mode
    sizes = {w.role: _size(w) for w in wanted_files(ctx)}
    weights_roles = ["main"] + (["mtp"] if speculative == "mtp" else [])
    if any(sizes.get(r) is None for r in weights_roles) or (speculative == "dspark" and sizes.get("dspark") is None):
        return [Finding("info", "memory budget: model sizes are known once the files are downloaded")]
    budget = estimate(sum(sizes[r] for r in weights_roles), ctx.spec.server.ctx,
                      drafter_bytes=sizes["dspark"] if speculative == "dspark" else 0)
    level, message = judge(budget, _mem_total(ctx))
    return [Finding({"ok": "info", "warn": "warning", "error": "error"}[level], f"memory budget {message}")]


def _size(want: Wanted) -> int | None:
    if want.path.is_file():
        return want.path.stat().st_size
    return want.entry.size


def _mem_total(ctx: Context) -> int:
    memory = getattr(ctx.facts, "memory", None)
    if memory is not None and memory.total_bytes:
        return memory.total_bytes
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def removal_changes(ctx: Context) -> list[Change]:
    """Only with model.remove_unused, only in directories we download into, never a file a release uses."""
    if not ctx.spec.model.remove_unused:
        return []
    keep = _in_use(ctx) | {str(w.path) for w in wanted_files(ctx)}
    directories = {w.path.parent for w in wanted_files(ctx) if w.fetch}
    stale = sorted(p for d in directories if d.is_dir() for p in d.glob("*.gguf") if str(p) not in keep)
    return [Change(f"remove unused model {p}", before=f"{p}\n", after=None) for p in stale]


def apply(ctx: Context, plan: RolePlan) -> str:
    cache, done = digest_cache(ctx), []
    with download.progress_display(json_mode=not ctx.progress) as progress:
        for want in wanted_files(ctx):
            ok, _, _ = download.check_in_place(want.path, sha256=want.entry.sha256, size=want.entry.size,
                                               cache=cache)
            if ok:
                continue
            ctx.say(f"downloading model.{want.role} to {want.path}")
            try:
                result = download.fetch(want.entry.source, want.path, sha256=want.entry.sha256,
                                        size=want.entry.size, progress=progress, cache=cache)
            except download.DownloadError as exc:
                raise RoleFailed(f"model.{want.role}: {exc}; the serving release is untouched") from None
            done.append(f"{want.role} {download.human_bytes(result.size)}")
    errors = [f for f in identity_findings(ctx) + budget_findings(ctx) if f.level == "error"]
    if errors:
        raise RoleFailed("; ".join(str(f) for f in errors) + "; the serving release is untouched")
    for change in plan.changes:
        if change.what.startswith("remove unused model "):
            Path(change.what.removeprefix("remove unused model ")).unlink(missing_ok=True)
            done.append(change.what)
    return "; ".join(done) or "model files verified"
