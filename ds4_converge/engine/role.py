"""Engine role: resolve the pinned version to a commit and build it into its own release tree.

Planning reads the pin (``engine.ref``, or the installer's defaults) on every run, then needs git only when this
root cannot answer by itself: a commit pin, or a tag it resolved before, whose release is built, is known
without git (see :mod:`ds4_converge.engine.pins`). When git is needed and ``engine.prepare`` is set, the plan is
only "run engine.prepare", applied after the run lock, and the role is planned again on the refreshed source.
"""
from __future__ import annotations

import os
from functools import partial

from ds4_converge.core.context import Context
from ds4_converge.core.crashpoints import crash_point
from ds4_converge.core.memory_fit import streaming_hint
from ds4_converge.core.plan import Change, Finding, RoleFailed, RolePlan
from ds4_converge.core.shell import CommandFailed, run
from ds4_converge.engine import release as releases
from ds4_converge.engine.builder import Builder, builder_for, closed_to
from ds4_converge.engine.git import SHA, EngineRepo, RepoError
from ds4_converge.engine.installer import InstallerError, read_pin
from ds4_converge.spec.values import is_remote

NAME = "engine"


def _repo_url(ctx: Context, pinned_repo: str | None) -> str:
    url = ctx.spec.engine.repo or pinned_repo
    if is_remote(url):
        return url
    return str(ctx.host_path(url))  # a local path, relative to the spec file


def _relative_repo(ctx: Context) -> str:
    """`; engine.repo is X, read relative to …` where the spec names its repository by a relative path."""
    raw = ctx.spec.engine.repo
    if raw is None or "://" in raw or ":" in raw.split("/")[0]:
        return ""
    note = ctx.loaded.relative_to_spec(raw)
    return f"; engine.repo{note}" if note else ""


def pin(ctx: Context) -> tuple[str, str]:
    """(repository URL, ref): the version the spec pins, as the installer that runs would pin it."""
    engine = ctx.spec.engine
    pinned_repo, ref = None, engine.ref
    if engine.installer:
        try:
            found = read_pin(engine.installer, ctx.loaded.base_dir)
        except InstallerError as exc:
            local = not engine.installer.startswith(("https://", "http://"))
            raise RoleFailed(ctx.loaded.locate("engine.installer", f"{exc}" + (
                ctx.loaded.relative_to_spec(engine.installer) if local else ""))) from None
        pinned_repo, ref = found.repo, found.ref
    return _repo_url(ctx, pinned_repo), ref


def _known_commit(ctx: Context, url: str, ref: str) -> str | None:
    if SHA.match(ref):
        return ref
    return ctx.pins.commit(url, ref)


def _resolve(ctx: Context, repo: EngineRepo, ref: str) -> str:
    try:
        commit, kind = repo.resolve_kind(ref)
    except RepoError as exc:
        skipped = (" (check mode does not run engine.prepare, which may create it)"
                   if ctx.check and ctx.spec.engine.prepare else "")
        raise RoleFailed(f"{exc}{skipped}{_relative_repo(ctx)}") from None
    if kind == "tag":
        ctx.pins.learn(repo.url, ref, commit)
    return commit


def plan(ctx: Context) -> RolePlan:
    engine = ctx.spec.engine
    url, ref = pin(ctx)
    repo = EngineRepo(url, ctx.layout.engine_cache)
    commit = _known_commit(ctx, url, ref)
    if commit is not None:
        release = releases.load(ctx.layout, _request(ctx, commit, ref).release_id)
        if release is not None and (not engine.commit or engine.commit == commit):
            return _built(ctx, release, ref)
    changes: list[Change] = []
    # from here git is asked (to resolve the ref, or to fetch the commit to build): refresh its source first
    if engine.prepare and not ctx.prepared:
        prepare = Change(f"run engine.prepare: {' '.join(engine.prepare)}", counts=False, action=_prepare)
        if not ctx.check:
            return RolePlan(NAME, [prepare], reason=f"refresh the engine source, then resolve {ref}", replan=True)
        changes.append(prepare)  # --check shows it, and resolves from the source as it is now
    if commit is None:
        commit = _resolve(ctx, repo, ref)
    if engine.commit and engine.commit != commit:
        raise RoleFailed(f"{ref} resolves to {commit}, but engine.commit pins {engine.commit}")
    request = _request(ctx, commit, ref)
    ctx.build = request
    ctx.release = releases.load(ctx.layout, request.release_id)
    if ctx.release:
        return RolePlan(NAME, changes, reason=f"release {ctx.release.id} ({ref}) is built",
                        findings=_memory_findings(ctx, ctx.release))
    command = " ".join(request.make_argv())
    findings: list[Finding] = []  # what the build's --help offers is known once it is built (see _build)
    changes.append(Change(f"build release {request.release_id}", before=None, after=f"{ref} = {commit}\n{command}\n",
                          action=partial(_build, repo=repo, request=request, findings=findings)))
    return RolePlan(NAME, changes, reason=f"build {ref} ({commit[:12]}) with make {engine.target}", findings=findings)


def _request(ctx: Context, commit: str, ref: str) -> releases.BuildRequest:
    engine = ctx.spec.engine
    return releases.BuildRequest(commit=commit, ref=ref, target=engine.target, cuda_arch=engine.cuda_arch,
                                 toolkit=ctx.toolkit, jobs=engine.jobs or os.cpu_count() or 1)


def _built(ctx: Context, release: releases.Release, ref: str) -> RolePlan:
    ctx.build = _request(ctx, release.commit, ref)
    ctx.release = release
    return RolePlan(NAME, reason=f"release {release.id} ({ref}) is built", findings=_memory_findings(ctx, release))


def _memory_findings(ctx: Context, release: releases.Release) -> list[Finding]:
    """A model set the models role let through over budget (memory_budget: warn): what this build offers."""
    hint = streaming_hint(release.flags) if ctx.memory is not None and ctx.memory.short else None
    return [Finding("warning", hint)] if hint else []


# ------------------------------------------------------------------------------------- what applying does


def _prepare(ctx: Context) -> str:
    """Bounded (engine.prepare_timeout_s, its whole process group killed); whatever bytes it prints are read as
    text with replacement, never decoded strictly."""
    engine = ctx.spec.engine
    try:
        run(engine.prepare, cwd=ctx.loaded.base_dir, timeout=engine.prepare_timeout_s)
    except CommandFailed as exc:
        if exc.timed_out is not None:
            raise RoleFailed(f"engine.prepare timed out after {engine.prepare_timeout_s}s (engine.prepare_timeout_s)"
                             f"; its processes were killed", exc.tail[-2000:]) from None
        if exc.returncode is None:
            raise RoleFailed(f"cannot run engine.prepare: {exc.tail}") from None
        raise RoleFailed(f"engine.prepare exited {exc.returncode}", exc.tail[-2000:]) from None
    ctx.prepared = True
    return "engine source refreshed (engine.prepare)"


def _builder(ctx: Context, findings: list[Finding]) -> Builder | None:
    """The unprivileged user who builds (engine/builder.py); None: this process builds."""
    builder = builder_for(ctx.spec.server.user)
    closed = builder and closed_to(builder, ctx.layout.releases)
    if closed:
        findings.append(Finding("warning", f"the engine was built as root: the build user {builder.name} cannot "
                                           f"enter {closed}; let it (chmod o+x) to build unprivileged"))
        return None
    return builder


def _full_disk(root) -> str:
    """' (No space left on device: …)' when the disk that holds the root is (all but) full, else ''."""
    import shutil

    try:
        free = shutil.disk_usage(root).free
    except OSError:
        return ""
    return f" (No space left on device: {free // 1024} KiB free where {root} is)" if free < 1024 * 1024 else ""


def _build(ctx: Context, *, repo: EngineRepo, request: releases.BuildRequest, findings: list[Finding]) -> str:
    ctx.say(f"building {request.ref} into releases/{request.release_id} "
            f"(log: {ctx.layout.build_log(request.release_id)})")
    try:
        ctx.release = releases.build(ctx.layout, repo, request, _builder(ctx, findings))
    except releases.BuildFailed as exc:
        said = [line.strip() for line in (exc.tail or "").splitlines() if line.strip()]
        # the command's last word (a compiler error, git's complaint); a log that holds none: a full disk, maybe
        why = f" ({said[-1][:300]})" if said else _full_disk(ctx.layout.root)
        raise RoleFailed(f"build failed: {exc}{why}; the serving release is untouched (log: {exc.log})",
                         exc.tail) from None
    except RepoError as exc:
        raise RoleFailed(str(exc)) from None
    findings += _memory_findings(ctx, ctx.release)  # the plan's own list: the role's warnings in the report
    crash_point("release-built")
    return f"built {ctx.release.id} ({ctx.release.ref})"
