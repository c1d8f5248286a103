"""The engine is built by an unprivileged user who may write only its release's partial tree: a Makefile that
writes a sibling release, into state.json or a link under logs/ is refused by the kernel, the release it builds is
root's again before anything trusts it; and a refusal after a release was built lists that build in the report."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from boxes import reachable_box, sim_variant

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="drops privileges for the build: needs root")

HOSTILE = """
cpu: pwn
pwn:
\t-echo pwned > ../PWNED-sibling
\t-echo '"pwned"' >> ../../state.json
\t-ln -s /etc/passwd ../../logs/planted
"""


def hostile_repo(sim_repo, tmp_path) -> str:
    """The simulated engine with a Makefile that also writes outside its tree, tagged v0.2.0-pwn."""
    clone = sim_variant(sim_repo, tmp_path / "hostile", HOSTILE, "v0.2.0-pwn")
    Path(clone).chmod(0o755)
    tmp_path.chmod(0o755)
    return clone


def test_a_makefile_can_write_only_its_own_tree(sim_repo, tmp_path):
    repo = hostile_repo(sim_repo, tmp_path)
    with reachable_box(sim_repo) as box:
        box.spec["engine"].update(repo=repo, ref="v0.2.0-pwn")
        box.write()
        rc, document = box.converge()
        assert rc == 0, document
        assert not (box.root / "releases" / "PWNED-sibling").exists()
        assert not (box.root / "logs" / "planted").is_symlink()
        json.loads((box.root / "state.json").read_text())  # untouched: still one JSON document
        [release] = [p for p in (box.root / "releases").iterdir()]
        log = (release / "build.log").read_text()
        assert "built as nobody" in log and log.count("Permission denied") >= 3, log
        owners = {(p.lstat().st_uid, p.lstat().st_mode & 0o6022) for p in [release, *release.rglob("*")]}
        assert owners == {(0, 0)}, "the release is root's, with no set-id bit and nothing writable by others"
        engine = next(r for r in document["roles"] if r["name"] == "engine")
        assert not any("built as root" in w for w in engine["warnings"]), engine


def test_a_refusal_after_a_build_lists_the_build(box, sim_repo, tmp_path):
    """pytest's 0700 tmp folder keeps the build user out, so this build runs as root (and says so); its planted link
    under logs/ is caught when the service role takes the lock: the report lists the release built before it."""
    box.spec["engine"].update(repo=hostile_repo(sim_repo, tmp_path), ref="v0.2.0-pwn")
    box.write()
    rc, document = box.converge()
    assert rc == 1, document
    statuses = {r["name"]: r["status"] for r in document["roles"]}
    assert statuses["engine"] == "changed" and statuses["service"] == "failed", document["roles"]
    engine = next(r for r in document["roles"] if r["name"] == "engine")
    assert any(w.startswith("the engine was built as root: the build user nobody cannot enter") for w in
               engine["warnings"]), engine
    assert "logs/planted" in document["error"] and document["changed"], document
