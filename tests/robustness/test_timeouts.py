"""A command that hangs (git, make, apt-get, systemctl) ends in a clean failure, with its whole process group
killed and no half-built release left behind."""
import os
import subprocess
import time
from pathlib import Path

import pytest

from ds4_converge.core.layout import Layout
from ds4_converge.core.shell import CommandFailed, run
from ds4_converge.engine import release as releases
from ds4_converge.engine.git import EngineRepo

# real hanging commands waited out: not for make test-fast
pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_timeout_is_a_clean_failure_and_kills_the_whole_group(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    started = time.monotonic()
    with pytest.raises(CommandFailed) as failed:
        run(["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"], timeout=0.5)
    assert time.monotonic() - started < 10
    assert failed.value.timed_out == 0.5 and "timed out after" in str(failed.value)
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild), "the command's children must not outlive its timeout"


def test_a_missing_command_is_a_clean_failure():
    with pytest.raises(CommandFailed) as failed:
        run(["/nonexistent/apt-get", "install", "-y", "x"])
    assert "could not be started" in str(failed.value)


def _repo_with_makefile(path: Path, recipe: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    (path / "Makefile").write_text(f"cpu:\n\t{recipe}\n")
    subprocess.run(["git", "-C", str(path), "add", "Makefile"], check=True)
    subprocess.run(["git", "-C", str(path), "commit", "-q", "-m", "m"], check=True, env=env)


def test_a_make_that_hangs_times_out_and_leaves_no_partial_tree(tmp_path, monkeypatch):
    source = tmp_path / "src"
    _repo_with_makefile(source, "sleep 60")
    commit = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    layout = Layout(tmp_path / "root")
    layout.ensure()
    monkeypatch.setattr(releases, "MAKE_TIMEOUT_S", 1)
    request = releases.BuildRequest(commit=commit, ref="main", target="cpu", cuda_arch=None,
                                    toolkit=releases.Toolkit(), jobs=1)
    with pytest.raises(releases.BuildFailed) as failed:
        releases.build(layout, EngineRepo(str(source), layout.engine_cache), request)
    assert "timed out after 1s" in str(failed.value)
    assert list(layout.releases.iterdir()) == [], "no .partial tree and no release"
