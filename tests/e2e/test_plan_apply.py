"""Plan → apply through the real CLI: --check runs no command that changes anything, engine.prepare runs only
when git is needed (and after the lock), and a no-op runs no git, no make, no prepare and imports nothing heavy.

git and make are wrapped on PATH to log each call, then run for real.
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

HEAVY = ("numpy", "gguf", "huggingface_hub", "requests", "urllib3", "rich", "jinja2", "tenacity")


@pytest.fixture
def logged(tmp_path):
    """A PATH on which git and make log `tool args…` to a file, then run the real ones."""
    bindir, log = tmp_path / "logged-bin", tmp_path / "commands.log"
    bindir.mkdir()
    for tool in ("git", "make"):
        real = shutil.which(tool)
        (bindir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {log}\nexec {real} "$@"\n')
        (bindir / tool).chmod(0o755)

    class Logged:
        env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}

        @staticmethod
        def calls() -> list[str]:
            lines = log.read_text().splitlines() if log.exists() else []
            log.unlink(missing_ok=True)
            return lines

    return Logged


def with_prepare(box, tmp_path):
    marker = tmp_path / "prepare.log"
    box.spec["engine"]["prepare"] = ["sh", "-c", f"echo ran >> {marker}"]
    box.write()
    return marker


def test_check_on_a_new_box_runs_no_prepare_no_build_and_writes_nothing(box, tmp_path, logged):
    marker = with_prepare(box, tmp_path)
    rc, document = box.converge("--check", env=logged.env)
    assert rc == 0, document
    engine = next(r for r in document["roles"] if r["name"] == "engine")
    assert engine["changes"][0].startswith("run engine.prepare: sh -c"), engine
    assert not marker.exists(), "--check never runs engine.prepare"
    assert not box.root.exists(), "--check writes nothing"
    calls = logged.calls()
    assert calls and all(c.startswith("git ls-remote ") for c in calls), calls


def test_prepare_runs_once_then_a_noop_needs_no_git_make_or_prepare(box, tmp_path, logged):
    marker = with_prepare(box, tmp_path)
    rc, first = box.converge(env=logged.env)
    assert rc == 0, first
    assert marker.read_text() == "ran\n"
    calls = logged.calls()
    assert any(c.startswith("make ") for c in calls) and any(c.startswith("git ls-remote") for c in calls)

    rc, again = box.converge(env=logged.env)
    assert rc == 0 and not again["changed"], again
    assert logged.calls() == [] and marker.read_text() == "ran\n", "a converged box asks no git, runs no prepare"

    box.spec["engine"]["ref"] = "v0.3.0"  # a new pin is seen, and resolved (prepare first)
    box.write()
    rc, upgraded = box.converge(env=logged.env)
    assert rc == 0 and upgraded["release"] != first["release"], upgraded
    assert marker.read_text() == "ran\nran\n"
    assert any(c.startswith("git ls-remote") and "v0.3.0" in c for c in logged.calls())


def test_a_noop_imports_nothing_heavy(served_box):
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "ds4_converge.cli", str(served_box.spec_path),
                           "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and '"changed": false' in proc.stdout, proc.stdout + proc.stderr[-2000:]
    imported = {m.group(1) for m in re.finditer(r"\|\s+(\S+)$", proc.stderr, re.MULTILINE)}
    assert "ds4_converge.orchestrate.reconciler" in imported, "the importtime output was not read"
    assert not imported.intersection(HEAVY), sorted(imported.intersection(HEAVY))
