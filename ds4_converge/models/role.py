"""Model files role: the exact files the engine loads, downloaded, verified and identified before it starts.

No globs, no partial files, no "ls *.gguf | head -1": each file is named, its size and sha256 are checked
(cached by inode and mtime, so a converged box does not rehash 80 GB), and its GGUF identity must match its
role before any engine is stopped.
"""
from __future__ import annotations

import os
from functools import partial
from pathlib import Path

from ds4_converge.core.context import Context
from ds4_converge.core.crashpoints import crash_point
from ds4_converge.core.plan import Change, Finding, RoleFailed, RolePlan
from ds4_converge.core.model_paths import ModelPaths
from ds4_converge.core.memory_fit import SSD_STREAMING, MemoryFit, Room
from ds4_converge.models.budget import estimate, integrated_copy_bytes, judge, short_but_warned
from ds4_converge.models.digests import check_in_place
from ds4_converge.engine_knowledge import FORK, for_version, known_versions
from ds4_converge.models.gguf import judge_files, read_gguf_header
from ds4_converge.models.placement import (SLOTS, Placement, dest_is_file, hub_missing, missing_without_source,
                                           placements)
from ds4_converge.spec.sources import parse_source
from ds4_converge.units import human_bytes

NAME = "models"


def wanted_files(ctx: Context) -> list[Placement]:
    found = placements(ctx.spec.model, ctx.host_path, ctx.layout.models)
    for want in found:
        if want.path is None:  # preflight reports it first; this guards callers that skip it
            raise RoleFailed(f"model.{want.slot}: {want.problem}")
    return found


def _in_use(ctx: Context) -> set[str]:
    deployments = (ctx.state.current, *ctx.state.good)
    return {f for d in deployments if d for f in d.model_files}


def plan(ctx: Context) -> RolePlan:
    changes, reasons = [], []
    wanted = wanted_files(ctx)
    for want in wanted:
        ok, why, _ = check_in_place(want.path, sha256=want.entry.sha256, size=want.entry.size, cache=ctx.digests)
        if ok:
            reasons.append(f"{want.slot}: {why}")
            continue
        if not want.fetch:
            if not want.path.exists():
                raise RoleFailed(missing_without_source(ctx.loaded, want))
            raise RoleFailed(f"model.{want.slot}: {want.path}: {why}; the file was not used")
        if why.endswith("not a regular file") or why.startswith("missing ("):
            raise RoleFailed(f"model.{want.slot}.dest: {want.path} is {why.removesuffix(', not a regular file')}: a "
                             f"download cannot put the model there; remove it or name another dest")
        if want.path.exists() and str(want.path) in _in_use(ctx):
            raise RoleFailed(f"model.{want.slot}: {want.path} is used by a serving or last-good release and {why}; "
                             "download the new file under another name instead of overwriting it")
        if (missing := hub_missing(ctx.loaded, want)) is not None:
            raise RoleFailed(missing)
        size = f" ({human_bytes(want.entry.size)})" if want.entry.size else ""
        changes.append(Change(f"download model.{want.slot} {parse_source(want.entry.source)} → {want.path}{size}",
                              after=f"{want.path}: {why}\n", action=partial(_download, want=want)))
    ctx.models = ModelPaths(**{w.slot: w.path for w in wanted})
    findings = identity_findings(ctx) + budget_findings(ctx)
    downloads = len(changes)
    if changes:
        # what a file is can be read only once it is here: the plan says it will be checked, before any switch
        changes.append(Change("check what the downloaded files are (GGUF identity) and that they fit in memory",
                              action=_check_downloaded))
    removals = removal_changes(ctx)
    changes += removals
    reason = "; ".join(reasons) if not changes else what_changes(downloads, len(removals))
    return RolePlan(NAME, changes, reason=reason, findings=findings)


def what_changes(downloads: int, removals: int) -> str:
    """The plan in words that read after "would": files, not changes (the check after a download is no file)."""
    said = []
    if downloads:
        said.append(f"download {downloads} model file{'s' if downloads > 1 else ''} and check "
                    f"{'them' if downloads > 1 else 'it'}")
    if removals:
        said.append(f"remove {removals} unused model file{'s' if removals > 1 else ''}")
    return ", ".join(said)


def identity_findings(ctx: Context) -> list[Finding]:
    """What each present file is; a drafter as the main model (or, by the fork's rules, a 0731 base with the
    legacy MTP) is refused. Judged by the rules of the engine version the pin names; where the pin names none
    the version is known only once it is built, so here a file is refused only when no known version takes
    it, and the service role judges it again by the built version's rules before anything is stopped."""
    paths = {slot: getattr(ctx.models, slot) for slot in SLOTS}
    if not all(p is None or p.is_file() for p in paths.values()):
        return [Finding("info", "GGUF identity is checked once the files are downloaded")]
    verdicts = [judge_files(paths["main"], paths["mtp"], paths["dspark"], for_version(name))
                for name in _versions_to_judge_by(ctx)]
    if all(verdicts):
        return [Finding("error", message) for message in verdicts[0]]
    return []


def _versions_to_judge_by(ctx: Context) -> list[str]:
    engine = ctx.spec.engine
    pinned = engine.commit or engine.ref or ""
    named = [name for name in known_versions() if name != FORK and pinned.startswith(name)]
    return named or known_versions()


def budget_findings(ctx: Context) -> list[Finding]:
    """Weights + KV for ctx + drafter (+ what a load on unified memory takes for a while) against host RAM and
    against what is free now (MemAvailable + what the serving engine returns), with the numbers, whatever the
    verdict."""
    speculative = ctx.spec.server.speculative.mode
    sizes = {w.slot: _size(w) for w in wanted_files(ctx)}
    weights_slots = ["main"] + (["mtp"] if speculative == "mtp" else [])
    if any(sizes.get(s) is None for s in weights_slots) or (speculative == "dspark" and sizes.get("dspark") is None):
        return [Finding("info", "memory budget: model sizes are known once the files are downloaded")]
    unified = _unified(ctx)
    budget = estimate(sum(sizes[s] for s in weights_slots), ctx.spec.server.ctx,
                      drafter_bytes=sizes["dspark"] if speculative == "dspark" else 0, unified=unified,
                      device_copies=device_copies(ctx) if unified else 0)
    host = room(ctx)
    level, message = judge(budget, host)
    short = level == "error" and ctx.spec.model.memory_budget == "warn"
    ctx.memory = MemoryFit(budget, host, short=message if short else None)
    if short:
        return [Finding("warning", short_but_warned(message))]
    return [Finding({"ok": "info", "warn": "warning", "error": "error"}[level], f"memory budget {message}")]


def device_copies(ctx: Context) -> int:
    """What a CUDA load on an integrated GPU keeps twice (engine knowledge: load.integrated_copies), read from the
    main file's tensor table; by the version the pin names, or the largest of those it may be. None of it for a
    layer slice or SSD streaming (the engine builds no copies then) or with the engine's own switch set off."""
    spec, main = ctx.spec, ctx.models.main
    if not spec.engine.target.startswith("cuda") or spec.distributed is not None or main is None \
            or not main.is_file() or any(a.startswith(SSD_STREAMING) for a in spec.server.extra_args):
        return 0
    rules = [r for r in (for_version(v)["load"].get("integrated_copies") for v in _versions_to_judge_by(ctx))
             if r and spec.server.env.get(r["off_env"], "0") in ("", "0")]
    if not rules:
        return 0
    try:
        tensors = read_gguf_header(main).tensors
    except (OSError, ValueError):
        return 0  # identity_findings reports an unreadable file
    return max(integrated_copy_bytes(tensors, rule) for rule in rules)


def _size(want: Placement) -> int | None:
    if want.path.is_file():
        return want.path.stat().st_size
    return want.entry.size


def _mem_total(ctx: Context) -> int:
    memory = getattr(ctx.facts, "memory", None)
    if memory is not None and memory.total_bytes:
        return memory.total_bytes
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _unified(ctx: Context) -> bool:
    gpus = getattr(ctx.facts, "gpus", None) or []
    return bool(gpus) and gpus[0].unified_memory


def room(ctx: Context) -> Room:
    """The host's memory and what is free for the new engine: MemAvailable plus what the serving engine of this
    root gives back when the switch stops it (facts captured elsewhere: what was captured with them)."""
    memory = getattr(ctx.facts, "memory", None)
    available = memory.available_bytes if memory is not None else None
    return Room(_mem_total(ctx), available, serving_engine_bytes(ctx) if available is not None else 0)


def serving_engine_bytes(ctx: Context) -> int:
    """What our serving engine holds that MemAvailable does not count (core.processes.returned_bytes), and
    on a unified-memory GPU what it holds there."""
    facts = ctx.facts
    if facts is None:
        return 0
    if facts.supervised_pids is not None:  # captured on another host: what was captured with the facts
        return facts.supervised_returned_bytes or 0
    holders = {listener.pid for listener in facts.listeners if listener.pid}
    ours = ctx.supervisor.owns(holders) if holders and ctx.supervisor is not None else set()
    return engine_bytes(facts, ours)


def engine_bytes(facts, pids) -> int:
    from ds4_converge.core import processes

    if not pids:
        return 0
    on_gpu = sum(p.used_memory_bytes or 0 for p in facts.gpu_processes if p.pid in pids) \
        if facts.gpus and facts.gpus[0].unified_memory else 0
    return processes.returned_bytes(pids) + on_gpu


def removal_changes(ctx: Context) -> list[Change]:
    """Only with model.remove_unused, only in directories we download into, never a file a release uses."""
    if not ctx.spec.model.remove_unused:
        return []
    wanted = wanted_files(ctx)
    keep = _in_use(ctx) | {str(w.path) for w in wanted}
    # a dest that names the file itself claims that file, not the folder around it (which may hold the user's own)
    directories = {w.path.parent for w in wanted if w.fetch and not dest_is_file(w.entry.dest)}
    stale = sorted(p for d in directories if d.is_dir() for p in d.glob("*.gguf") if str(p) not in keep)
    return [Change(f"remove unused model {p}", before=f"{p}\n", after=None, action=partial(_remove, path=p))
            for p in stale]


# ------------------------------------------------------------------------------------- what applying does


def _download(ctx: Context, *, want: Placement) -> str:
    from ds4_converge.models import download  # requests and huggingface_hub: only when something downloads

    ctx.say(f"downloading model.{want.slot} to {want.path}")
    entry = want.entry
    try:
        with download.progress_display(json_mode=not ctx.progress) as progress:
            result = download.fetch(entry.source, want.path, sha256=entry.sha256, size=entry.size,
                                    progress=progress, cache=ctx.digests)
    except download.DownloadError as exc:
        raise RoleFailed(f"model.{want.slot}: {exc}; the serving release is untouched") from None
    finally:
        ctx.digests.flush()  # what was hashed while streaming is true whatever happens next
    return f"{want.slot} {human_bytes(result.size)}"


def _check_downloaded(ctx: Context) -> str:
    errors = [f for f in identity_findings(ctx) + budget_findings(ctx) if f.level == "error"]
    if errors:
        raise RoleFailed("; ".join(str(f) for f in errors) + "; the serving release is untouched")
    crash_point("models-placed")
    return ""


def _remove(ctx: Context, *, path: Path) -> str:
    path.unlink(missing_ok=True)
    return f"removed unused model {path}"
