"""engine/make_sim_repo.py rewrites only its own repository (it prunes branches and hard-resets the checkout),
and `--help` prints help instead of creating a directory named --help."""
import subprocess
import sys
from pathlib import Path

import pytest

# real git repositories built and rewritten: not for make test-fast
pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[2] / "engine" / "make_sim_repo.py"


def make(dest, cwd=None):
    return subprocess.run([sys.executable, str(SCRIPT), str(dest)], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}).stdout.strip()


def test_help_prints_help_and_creates_nothing(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0 and "usage: make_sim_repo.py" in proc.stdout and "DEST" in proc.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def someone_elses_repo(tmp_path):
    repo = tmp_path / "work"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "notes.txt").write_text("my work\n")
    git(repo, "add", "notes.txt")
    git(repo, "commit", "-q", "-m", "mine")
    git(repo, "branch", "feature")
    return repo


def test_a_repository_it_did_not_make_is_refused_untouched(someone_elses_repo):
    repo = someone_elses_repo
    refs = git(repo, "for-each-ref")
    proc = make(".", cwd=repo)
    assert proc.returncode == 2 and "did not make" in proc.stderr and "refs/heads/feature" in proc.stderr
    assert git(repo, "for-each-ref") == refs and (repo / "notes.txt").read_text() == "my work\n"


def test_a_directory_with_other_files_is_refused(tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    proc = make(tmp_path)
    assert proc.returncode == 2 and "neither empty nor a git repository" in proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_its_own_repository_is_refreshed_but_local_changes_are_never_reset(tmp_path):
    dest = tmp_path / "sim.git"
    assert make(dest).returncode == 0
    assert git(dest, "config", "--get", "ds4sim.madeby") == "make_sim_repo.py"
    git(dest, "tag", "-f", "v0.2.0", "v0.1.0")  # a moved tag in its own repository is put back
    assert make(dest).returncode == 0
    git(dest, "config", "--unset", "ds4sim.madeby")  # as made by an earlier version of the script
    assert make(dest).returncode == 0, "an unmarked repository holding only its refs, checkout clean"
    (dest / "sim.conf").write_text("edited\n")
    proc = make(dest)
    assert proc.returncode == 2 and "its checkout has changes" in proc.stderr
    assert (dest / "sim.conf").read_text() == "edited\n"


def test_an_empty_directory_is_fine(tmp_path):
    assert make(tmp_path).returncode == 0 and (tmp_path / ".git").is_dir()
