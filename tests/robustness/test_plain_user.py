"""A plain user against a root that root converged: every command names the permission it was refused (path and
user), says what serves as far as it can tell ("cannot tell", never "not serving" or "nothing"), and writes no
traceback anywhere. The CLI runs as nobody, for real."""
from __future__ import annotations

import os
import pwd
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from boxes import Box, reachable_box

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs the CLI as nobody: needs root")


def _interpreter_for_everyone() -> str | None:
    """This Python, as a path every user may run (a venv's link may point into /root, which is 0700)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, os.path.realpath(sys.executable), f"/usr/bin/{version}",
                      f"/usr/local/bin/{version}"):
        path = Path(candidate)
        if path.exists() and all(os.stat(p).st_mode & 0o001 for p in [*path.resolve().parents, path.resolve()]):
            return str(path)
    return None


@pytest.fixture
def root_box(sim_repo):
    """A box converged by root, in a folder every user may enter."""
    with reachable_box(sim_repo) as box:
        rc, document = box.converge()
        assert rc == 0, document
        yield box


def as_nobody(box: Box, *args: str) -> subprocess.CompletedProcess:
    python = _interpreter_for_everyone()
    if python is None:
        pytest.skip("no Python interpreter every user may run")
    nobody = pwd.getpwnam("nobody")
    home = box.root.parent / "nobody-home"
    home.mkdir(exist_ok=True)
    os.chown(home, nobody.pw_uid, nobody.pw_gid)
    site = sysconfig.get_paths()["purelib"]  # this environment's packages, the editable ds4_converge among them
    boot = (f"import runpy, site; site.addsitedir({site!r}); "
            "runpy.run_module('ds4_converge.cli', run_name='__main__', alter_sys=True)")
    return subprocess.run([python, "-c", boot, *args], capture_output=True, text=True, timeout=120, cwd="/",
                          user=nobody.pw_uid, group=nobody.pw_gid, extra_groups=[],
                          env={"PATH": os.environ["PATH"], "NO_COLOR": "1", "HOME": str(home),
                               "XDG_CACHE_HOME": str(home / "cache"), "TMPDIR": str(home)})


def test_a_plain_user_is_told_which_permission_and_never_that_nothing_serves(root_box):
    spec = str(root_box.spec_path)
    home = root_box.root.parent / "nobody-home"
    bench = ("bench", "--reps", "1", "--prompt-tokens", "16", "--concurrency", "1", "--gen-tokens", "2")
    for args in (("status",), bench, ("stop",), ("converge",), ("rollback",)):
        proc = as_nobody(root_box, args[0], spec, *args[1:])
        said = proc.stdout + proc.stderr
        assert proc.returncode == 1, (args, said)
        assert "permission denied: " in said and "for user nobody" in said, (args, said)
        assert "internal error" not in said and "Traceback" not in said, (args, said)
        assert "not serving" not in said and "serving: nothing" not in said, (args, said)
    status = as_nobody(root_box, "status", spec)
    assert status.stdout.startswith(f"ds4: cannot tell what serves: permission denied: "
                                    f"{root_box.root}/run (owned by root, mode 700) for user nobody"), status.stdout
    assert f"{root_box.endpoint} answers /v1/models" in status.stdout
    proc = as_nobody(root_box, *bench[:1], spec, *bench[1:], "--json")
    assert f"bench: permission denied: {root_box.root}/bench: cannot be created in {root_box.root} (owned by root, mode 755) for user nobody" in proc.stdout, proc.stdout
    assert [p.name for p in home.rglob("*") if "error" in p.name] == [], "no traceback file, in TMPDIR or anywhere"
    assert root_box.status()["healthy"]
