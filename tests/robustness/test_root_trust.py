"""Nothing under paths.root is followed or written through a link the tool did not make, and a root (or a folder in
it) that another user owns or can write is refused before anything is written, naming the path and the owner."""
import os
import pwd

import pytest

LINKED = ["converge.lock", "logs", "run", "supervisor", "locks", "releases", "cache",
          "logs/ds4.log", "supervisor/programs/ds4.conf", "supervisor/supervisord.conf"]


def _nobody() -> int:
    return pwd.getpwnam("nobody").pw_uid


@pytest.mark.parametrize("entry", LINKED)
def test_a_link_under_root_is_refused_and_its_target_untouched(served_box, tmp_path, entry):
    box = served_box
    path = box.root / entry
    target = tmp_path / "target"
    if path.is_dir():
        moved = tmp_path / "moved"
        path.rename(moved)
        target.mkdir()
        restore = lambda: (path.unlink(), moved.rename(path))  # noqa: E731
    else:
        moved = tmp_path / "moved"
        path.rename(moved)
        target.write_text("precious\n")
        restore = lambda: (path.unlink(), moved.rename(path))  # noqa: E731
    path.symlink_to(target)
    before = sorted(p.name for p in target.iterdir()) if target.is_dir() else target.read_text()
    try:
        box.spec["server"]["env"]["DS4_SIM_TAG"] = entry  # a change: a run that would write
        box.write()
        proc = box.cli(str(box.spec_path), timeout=120)
        assert proc.returncode == 1, (proc.stdout, proc.stderr)
        assert f"{path} is a symbolic link" in proc.stderr + proc.stdout, proc.stderr
        after = sorted(p.name for p in target.iterdir()) if target.is_dir() else target.read_text()
        assert after == before, "nothing was written through the link"
        if entry in ("converge.lock", "logs"):  # check mode (a shared lock) refuses the same way
            check = box.cli(str(box.spec_path), "--check", timeout=120)
            assert check.returncode != 0 and f"{path} is a symbolic link" in check.stdout + check.stderr, check
    finally:
        del box.spec["server"]["env"]["DS4_SIM_TAG"]
        box.write()
        restore()
    assert box.status()["healthy"], "the serving engine was left alone"


# only root can give a folder to another user (README, "Tests a plain user skips")
CHOWN_NEEDS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="gives the root to nobody (chown): needs root")


@pytest.mark.parametrize("how", [pytest.param("owned by nobody", marks=CHOWN_NEEDS_ROOT), "world-writable",
                                 "group-writable folder in it"])
def test_a_root_another_user_can_write_is_refused_naming_path_and_owner(box, how):
    rc, first = box.converge()
    assert rc == 0, first
    target = box.root / "logs" if how == "group-writable folder in it" else box.root
    saved = os.stat(target)
    if how == "owned by nobody":
        os.chown(target, _nobody(), -1)
    else:
        os.chmod(target, 0o777 if how == "world-writable" else 0o775)
    try:
        box.spec["server"]["env"]["DS4_SIM_TAG"] = "x"
        box.write()
        proc = box.cli(str(box.spec_path), timeout=120)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1 and str(target) in out, out
        assert ("owned by nobody" in out) if how == "owned by nobody" else ("can be written by others" in out), out
        assert box.status()["release"] == first["release"]
    finally:
        os.chown(target, saved.st_uid, -1)
        os.chmod(target, saved.st_mode & 0o7777)


def _self_opening_repo(sim_repo, tmp_path) -> str:
    """The simulated engine whose Makefile makes its own tree world-writable, tagged v0.2.0-open."""
    from boxes import sim_variant

    return sim_variant(sim_repo, tmp_path / "open", "\ncpu: open-up\nopen-up:\n\tchmod 0777 .\n", "v0.2.0-open")


def test_a_release_that_makes_itself_writable_by_others_is_not_started_and_stop_still_stops(box, sim_repo, tmp_path):
    """A release built as root (the fallback under a 0700 folder) ran `chmod 0777 .` and was started, exit 0; then
    `stop` refused ("paths.root cannot be trusted"). The built tree's modes are checked as the root's are."""
    rc, first = box.converge()
    assert rc == 0, first
    before = box.status()
    box.spec["engine"].update(repo=_self_opening_repo(sim_repo, tmp_path), ref="v0.2.0-open")
    box.write()
    rc, document = box.converge()
    assert rc == 1 and not document["reverted"], document
    assert "the built release cannot be trusted, nothing starts from it" in document["error"], document["error"]
    assert "can be written by others" in document["error"] and "mode 0777" in document["error"], document["error"]
    status = box.status()
    assert (status["release"], status["pid"], status["healthy"]) == (before["release"], before["pid"], True), status
    assert not any("open" in p.name for p in (box.root / "releases").iterdir())
    # a release made writable by others after the build: a run refuses it, and stop still stops what runs
    release = box.root / "releases" / before["release"]
    release.chmod(0o777)
    try:
        rc, document = box.converge()
        assert rc == 1 and f"{release} can be written by others" in document["error"], document
        rc, stopped = box.json("stop", str(box.spec_path))
        assert rc == 0 and stopped["stopped"], stopped
        assert box.status()["pid"] is None
    finally:
        release.chmod(0o755)


def test_a_built_trees_modes_are_judged_without_following_links(tmp_path):
    from ds4_converge.core.root_trust import tree_problems

    tree = tmp_path / "release"
    (tree / "obj").mkdir(parents=True)
    (tree / "ds4-server").write_text("#!/bin/sh\n")
    (tree / "obj").chmod(0o2755)  # a set-group-id folder only passes its group on: inherited, not a problem
    (tree / "outside").symlink_to("/etc")  # a link's own mode means nothing, and it is not followed
    assert tree_problems(tree) == []
    (tree / "ds4-server").chmod(0o4755)
    (tree / "obj").chmod(0o777)
    assert tree_problems(tree) == [f"{tree / 'obj'} can be written by others (mode 0777)",
                                   f"{tree / 'ds4-server'} runs with its owner's or group's rights (mode 4755)"]
