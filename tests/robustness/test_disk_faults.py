"""Disk faults under paths.root, on a real tmpfs mounted for the test (by root, or in a plain user's own namespace):
a disk that fills during a write leaves the serving release running and says so; a read-only root is named as
such, not reported as a lack of free space."""
import tempfile
from pathlib import Path

import pytest

from boxes import Box, free_port, tmpfs

from ds4_converge.preflight.rules import BUILD_BYTES

# what preflight asks for a first build, and a little for the release, logs and state: memory only as it is filled
SIZE = f"{(BUILD_BYTES >> 20) + 64}m"


@pytest.fixture
def small_box(sim_repo):
    # a short mount point: supervisord's socket under ROOT/run must fit AF_UNIX's ~108 bytes, and pytest-xdist's
    # temporary paths are longer
    with tempfile.TemporaryDirectory(prefix="ds4-disk.") as short, tmpfs(Path(short) / "d", SIZE) as disk:
        made = Box(disk.path / "root", sim_repo, free_port())
        made.inside, made.spec_path = disk.inside, Path(short) / "spec.yaml"  # a plain user's tmpfs: see boxes.tmpfs
        made.write()
        try:
            yield made
        finally:
            made.stop()


def test_a_disk_that_fills_during_the_build_leaves_the_serving_release_running(small_box):
    box = small_box
    rc, first = box.converge()
    assert rc == 0, first["error"]
    pid = box.status()["pid"]
    filler = box.root.parent / "filler"  # on the same tmpfs, after preflight passed: someone else fills it
    box.spec["engine"]["ref"] = "v0.3.0"
    box.spec["engine"]["prepare"] = ["sh", "-c", f"cat /dev/zero > {filler} 2>/dev/null; true"]
    box.write()
    try:
        proc = box.cli(str(box.spec_path), timeout=180)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1 and "Traceback" not in out, out
        assert "No space left on device" in out and "internal error" not in out, out  # the build's, named
        status = box.status()
        assert status["healthy"] and status["pid"] == pid and status["release"] == first["release"], status
    finally:
        filler.unlink(missing_ok=True)


def test_a_read_only_root_is_named_as_such(tmp_path, sim_repo):
    with tmpfs(tmp_path / "disk", SIZE, "ro") as mounted:  # a first converge on a read-only disk (nothing to remount)
        disk = mounted.path
        box = Box(tmp_path / "root", sim_repo, free_port())  # its spec file beside tmp_path/root, writable
        box.inside = mounted.inside
        box.spec["paths"]["root"] = str(disk / "root")
        box.write()
        proc = box.cli(str(box.spec_path), timeout=120)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1 and f"{disk} is on a read-only file system" in out, out
        assert "not enough disk" not in out and "Traceback" not in out, out
