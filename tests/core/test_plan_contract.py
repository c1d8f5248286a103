"""The plan → apply contract on the real roles: planning runs no user command and writes nothing; applying does
what the plan decided (the text it rendered, the files it listed), never a fresh render or a fresh look.
In-process, on a tmp root, without supervisord or an engine.
"""
from __future__ import annotations

import json
import subprocess

import pytest

from boxes import MODEL

from ds4_converge.orchestrate.context import make_context
from ds4_converge.core.plan import RoleFailed
from ds4_converge.engine import role as engine
from ds4_converge.engine.release import RECORD, RECORD_FORMAT, BuildRequest, Release, Toolkit
from ds4_converge.engine.server_args import ModelPaths
from ds4_converge.facts import HostFacts
from ds4_converge.models import role as models
from ds4_converge.service import render
from ds4_converge.service import role as service
from ds4_converge.service.switch import Switch
from ds4_converge.spec.loader import LoadedSpec
from fakehost import spec

COMMIT = "0123456789abcdef0123456789abcdef01234567"
FLAGS = frozenset({"-m", "--host", "--port", "-c", "--no-spec"})


def context(tmp_path, **sections):
    sections.setdefault("paths", {"root": str(tmp_path / "root")})
    sections.setdefault("server", {"port": 1})  # nobody listens on tcp/1
    loaded = LoadedSpec(spec(**sections), tmp_path / "spec.yaml")
    ctx = make_context(loaded, say=lambda *_: None)
    ctx.facts = HostFacts()
    return ctx


@pytest.fixture
def no_commands(monkeypatch):
    """Any process started from here on fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"planning ran a command: {args[0] if args else kwargs.get('args')}")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


# ------------------------------------------------------------------------------------------------ service


def test_service_applies_the_text_its_plan_rendered_and_renders_nothing_again(tmp_path, monkeypatch):
    ctx = context(tmp_path)
    model = tmp_path / "model.gguf"
    model.write_bytes(MODEL.read_bytes())  # the service role judges it by the release's engine version too
    ctx.release = Release(id="r1", path=tmp_path / "releases" / "r1", commit=COMMIT, ref="v1", target="cpu",
                          cuda_arch=None, toolkit=Toolkit(), flags=FLAGS)
    ctx.models = ModelPaths(main=model)
    plan = service.plan(ctx, Switch())  # the run's switch, which its apply begins
    whats = [c.what for c in plan.changes]
    assert whats[0] == str(ctx.layout.supervisord_conf) and whats[-1] == str(ctx.layout.program_conf("ds4"))
    assert not ctx.layout.root.exists(), "planning writes nothing"
    # the road the switch takes, step by step (--check shows the same plan)
    assert "road: cold start: check ports, arm guard, install, start supervisord, front door, probe, commit, " \
           "prune" in plan.notes

    def no_render(*args, **kwargs):
        raise AssertionError("apply rendered again")

    monkeypatch.setattr(render, "supervisord_conf", no_render)
    monkeypatch.setattr(render, "program_conf", no_render)
    write_conf = plan.changes[0]
    write_conf.apply(ctx)
    assert ctx.layout.supervisord_conf.read_text() == write_conf.after
    assert ctx.desired.program_conf == plan.changes[-1].after, "the switch starts what the plan showed"


# ------------------------------------------------------------------------------------------------- models


def test_models_removes_exactly_the_files_its_plan_listed(tmp_path):
    ctx = context(tmp_path, model={"main": {"source": "https://example.invalid/m/main.gguf"}, "remove_unused": True})
    ctx.layout.models.mkdir(parents=True)
    (ctx.layout.models / "main.gguf").write_bytes(b"GGUF")
    stale = ctx.layout.models / "old.gguf"
    stale.write_bytes(b"GGUF")
    plan = models.plan(ctx)
    assert [c.what for c in plan.changes] == [f"remove unused model {stale}"]
    arrived = ctx.layout.models / "arrived-after-the-plan.gguf"
    arrived.write_bytes(b"GGUF")
    for change in plan.changes:
        change.apply(ctx)
    assert not stale.exists() and arrived.exists(), "apply removes what the plan listed, and looks no further"


def test_models_planning_hashes_but_writes_no_cache(tmp_path):
    model = tmp_path / "main.gguf"
    model.write_bytes(b"GGUF")
    import hashlib

    ctx = context(tmp_path, model={"main": {"source": str(model), "sha256": hashlib.sha256(b"GGUF").hexdigest()}})
    ctx.layout.root.mkdir()
    plan = models.plan(ctx)
    assert plan.reason == "main: sha256 verified (hashed)"
    assert not (ctx.layout.cache / "digests.json").exists()
    ctx.remember_learned()  # the reconciler does this after the plans, outside --check
    assert (ctx.layout.cache / "digests.json").exists()


# ------------------------------------------------------------------------------------------------- engine


def prepare_spec(tmp_path):
    marker = tmp_path / "prepared"
    return {"repo": str(tmp_path / "mirror.git"), "ref": "v1", "target": "cpu",
            "prepare": ["sh", "-c", f"touch {marker}"]}, marker


def test_engine_prepare_is_a_change_applied_after_the_plan_never_run_by_it(tmp_path, no_commands):
    engine_spec, marker = prepare_spec(tmp_path)
    ctx = context(tmp_path, engine=engine_spec)
    plan = engine.plan(ctx)
    assert [c.what for c in plan.changes] == [f"run engine.prepare: sh -c touch {marker}"]
    assert plan.replan and not plan.changed, "a refresh alone is not a change of the box"
    assert not marker.exists()


def test_engine_prepare_runs_when_applied(tmp_path):
    engine_spec, marker = prepare_spec(tmp_path)
    ctx = context(tmp_path, engine=engine_spec)
    engine.plan(ctx).changes[0].apply(ctx)
    assert marker.exists() and ctx.prepared


def test_check_mode_shows_prepare_and_runs_no_user_command(tmp_path):
    engine_spec, marker = prepare_spec(tmp_path)
    ctx = context(tmp_path, engine=engine_spec)
    ctx.check = True
    with pytest.raises(RoleFailed, match=r"check mode does not run engine.prepare"):
        engine.plan(ctx)  # the mirror does not exist yet: only prepare would create it
    assert not marker.exists()


def built_release(ctx, commit: str, ref: str) -> str:
    request = BuildRequest(commit=commit, ref=ref, target="cpu", cuda_arch=None, toolkit=Toolkit(), jobs=1)
    path = ctx.layout.releases / request.release_id
    path.mkdir(parents=True)
    (path / "ds4-server").write_text("")
    (path / RECORD).write_text(json.dumps({"commit": commit, "ref": ref, "target": "cpu", "cuda_arch": None,
                                           "toolkit": {"nvcc": None, "cuda_home": None, "version": None},
                                           "flags": sorted(FLAGS), "format": RECORD_FORMAT,
                                           "options": {f: 1 for f in FLAGS}, "engine": "8d57664",
                                           "engine_why": "test"}))
    return request.release_id


def test_a_known_tag_whose_release_is_built_needs_no_git_and_no_prepare(tmp_path, no_commands):
    engine_spec, marker = prepare_spec(tmp_path)
    ctx = context(tmp_path, engine=engine_spec)
    ctx.pins.learn(engine_spec["repo"], "v1", COMMIT)
    release_id = built_release(ctx, COMMIT, "v1")
    plan = engine.plan(ctx)
    assert plan.changes == [] and ctx.release.id == release_id


def test_a_changed_pin_is_seen_without_any_state_saying_so(tmp_path, no_commands):
    installer = tmp_path / "install.sh"
    installer.write_text('DS4_REF="${DS4_REF:-v1}"\n')
    engine_spec, marker = prepare_spec(tmp_path)
    engine_spec["ref"] = None  # the installer pins it
    ctx = context(tmp_path, engine={**engine_spec, "installer": str(installer)})
    ctx.pins.learn(engine_spec["repo"], "v1", COMMIT)
    built_release(ctx, COMMIT, "v1")
    assert engine.plan(ctx).changes == []
    installer.write_text('DS4_REF="${DS4_REF:-v2}"\n')  # the installer that runs now pins another version
    plan = engine.plan(ctx)
    assert [c.what for c in plan.changes] == [f"run engine.prepare: sh -c touch {marker}"] and plan.replan


def test_a_commit_pin_needs_no_git(tmp_path, no_commands):
    ctx = context(tmp_path, engine={"repo": str(tmp_path / "nowhere.git"), "ref": COMMIT, "target": "cpu"})
    built_release(ctx, COMMIT, COMMIT)
    assert engine.plan(ctx).changes == []
