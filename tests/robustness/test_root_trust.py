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
