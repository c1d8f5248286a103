"""Engine role: resolve the pinned version to a commit and build it into its own release tree."""
from __future__ import annotations

import os
import subprocess

from ds4_converge.engine import release as releases
from ds4_converge.core.context import Context
from ds4_converge.engine.git import EngineRepo, RepoError
from ds4_converge.engine.installer import InstallerError, read_pin
from ds4_converge.core.plan import Change, RoleFailed, RolePlan

NAME = "engine"


def _repo_url(ctx: Context, pinned_repo: str | None) -> str:
    url = ctx.spec.engine.repo or pinned_repo
    if "://" in url or url.startswith("git@"):
        return url
    return str(ctx.host_path(url))  # a local path, relative to the spec file


def resolve(ctx: Context) -> tuple[EngineRepo, str, str]:
    """(repo, ref, commit): the version the spec pins, as the installer that runs would pin it."""
    engine = ctx.spec.engine
    if engine.prepare and not ctx.check:
        _prepare(ctx)
    pinned_repo, ref = None, engine.ref
    if engine.installer:
        try:
            pin = read_pin(engine.installer, ctx.loaded.base_dir)
        except InstallerError as exc:
            raise RoleFailed(str(exc)) from None
        pinned_repo, ref = pin.repo, pin.ref
    repo = EngineRepo(_repo_url(ctx, pinned_repo), ctx.layout.engine_cache)
    try:
        commit = repo.resolve(ref)
    except RepoError as exc:
        skipped = " (check mode does not run engine.prepare, which may create it)" if ctx.check and engine.prepare else ""
        raise RoleFailed(f"{exc}{skipped}") from None
    if engine.commit and engine.commit != commit:
        raise RoleFailed(f"{ref} resolves to {commit}, but engine.commit pins {engine.commit}")
    return repo, ref, commit


def _prepare(ctx: Context) -> None:
    proc = subprocess.run(ctx.spec.engine.prepare, cwd=ctx.loaded.base_dir, capture_output=True, text=True)
    if proc.returncode:
        raise RoleFailed(f"engine.prepare exited {proc.returncode}", proc.stderr[-2000:])


def plan(ctx: Context) -> RolePlan:
    engine = ctx.spec.engine
    repo, ref, commit = resolve(ctx)
    ctx.build = releases.BuildRequest(commit=commit, ref=ref, target=engine.target, cuda_arch=engine.cuda_arch,
                                      toolkit=ctx.toolkit, jobs=engine.jobs or os.cpu_count() or 1)
    ctx.engine_repo = repo
    ctx.release = releases.load(ctx.layout, ctx.build.release_id)
    if ctx.release:
        return RolePlan(NAME, reason=f"release {ctx.release.id} ({ref}) is built")
    command = " ".join(ctx.build.make_argv())
    return RolePlan(NAME, [Change(f"build release {ctx.build.release_id}", before=None,
                                  after=f"{ref} = {commit}\n{command}\n")],
                    reason=f"build {ref} ({commit[:12]}) with make {engine.target}")


def apply(ctx: Context, plan: RolePlan) -> str:
    ctx.say(f"building {ctx.build.ref} into releases/{ctx.build.release_id} (log: {ctx.layout.build_log(ctx.build.release_id)})")
    try:
        ctx.release = releases.build(ctx.layout, ctx.engine_repo, ctx.build)
    except releases.BuildFailed as exc:
        raise RoleFailed(f"build failed: {exc}; the serving release is untouched (log: {exc.log})", exc.tail) from None
    except RepoError as exc:
        raise RoleFailed(str(exc)) from None
    return f"built {ctx.release.id} ({ctx.release.ref})"
