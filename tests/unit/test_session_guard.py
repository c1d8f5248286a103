"""CI's verdicts on a whole run (tests/session_guard.py): --no-skips fails a run in which a test skipped, naming it
and why; --no-leaks fails one that left something new in the temporary or the home folder."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from session_guard import STRICT_ENV

pytestmark = pytest.mark.slow  # each runs pytest in a subprocess: make test's, not make test-fast's

TESTS = Path(__file__).resolve().parents[1]
# what the outer run sets for itself (its options, caches, its temporary folder: tests/run_tmp.py)
OUTER = ("PYTEST_ADDOPTS", "XDG_CACHE_HOME", STRICT_ENV, "PYTEST_DEBUG_TEMPROOT", "DS4C_RUN_TMP")


def _pytest(tmp_path, body: str, *options: str) -> tuple[int, str]:
    (tmp_path / "test_sample.py").write_text(body)
    for folder in ("home", "tmp"):
        (tmp_path / folder).mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in OUTER} | {
        "HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path / "tmp"), "PYTHONPATH": str(TESTS),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "session_guard", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), *options, str(tmp_path / "test_sample.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


SKIPS = ("import pytest\n"
         "def test_runs():\n    pass\n"
         "def test_skips():\n    pytest.skip('no frobnicator here')\n"
         "@pytest.mark.xfail(reason='known')\ndef test_xfails():\n    assert False\n")


def test_a_skip_fails_the_run_under_no_skips(tmp_path):
    rc, out = _pytest(tmp_path, SKIPS)
    assert rc == 0 and "1 skipped" in out, out
    rc, out = _pytest(tmp_path, SKIPS, "--no-skips")
    assert rc == 1, out
    assert "skipped: test_sample.py::test_skips: Skipped: no frobnicator here" in out, out
    assert "test_xfails" not in out.split("not clean")[-1], out  # an expected failure is not a skip


def test_a_file_left_in_home_or_tmp_fails_the_run_under_no_leaks(tmp_path):
    leaks = ("import os, tempfile\nfrom pathlib import Path\n"
             "def test_leaks_into_home():\n    (Path.home() / '.config' / 'frob').mkdir(parents=True)\n"
             "def test_leaks_into_tmp():\n    tempfile.mkdtemp(prefix='ds4c-left-')\n"
             "def test_cleans_up(tmp_path):\n    (tmp_path / 'x').write_text('fine')\n")
    rc, out = _pytest(tmp_path, leaks, "--no-leaks")
    assert rc == 1, out
    assert f"left outside the clone: {tmp_path}/home/.config/frob" in out, out
    assert f"left outside the clone: {tmp_path}/tmp/ds4c-left-" in out, out
    assert f"{tmp_path}/tmp/pytest-of-" not in out, out  # pytest's own, removed when the run passes


def test_ci_turns_both_on_with_one_variable(tmp_path, monkeypatch):
    monkeypatch.setenv(STRICT_ENV, "1")
    rc, out = _pytest(tmp_path, SKIPS)
    assert rc == 0, "the inner run is given no variable: " + out
    (tmp_path / "test_sample.py").write_text(SKIPS)
    env = {k: v for k, v in os.environ.items() if k not in OUTER} | {
        "PYTHONPATH": str(TESTS), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", STRICT_ENV: "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "session_guard", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_sample.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "skipped: test_sample.py::test_skips" in proc.stdout, proc.stdout


def test_a_clean_run_passes_under_both(tmp_path):
    rc, out = _pytest(tmp_path, "def test_clean(tmp_path):\n    (tmp_path / 'x').write_text('fine')\n",
                      "--no-leaks", "--no-skips")
    assert rc == 0 and "1 passed" in out, out


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_killed_runs_folder_is_removed_by_the_next_run_and_each_run_removes_its_own(tmp_path):
    """tests/run_tmp.py: every temporary file of a run lands in TMPDIR/ds4r<PID>; the run removes it, a killed run
    cannot, and the next run removes the folders whose PID no longer runs (not a live run's, not anyone else's)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    killed = tmp / f"ds4r{_dead_pid()}"
    (killed / "ds4-fleet.x" / "m").mkdir(parents=True)
    live = tmp / f"ds4r{os.getpid()}"  # a run that still runs (this one's PID)
    live.mkdir()
    other = tmp / "ds4r-not-a-run"
    other.mkdir()
    body = ("import os, tempfile\n"
            "def test_writes_a_temporary_file():\n"
            "    assert os.environ['TMPDIR'] == os.environ['DS4C_RUN_TMP'] != os.environ['PYTEST_DEBUG_TEMPROOT']\n"
            "    tempfile.mkstemp()\n")  # left behind: --no-leaks names it, the run removes it
    (tmp_path / "test_sample.py").write_text(body)
    (tmp_path / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in OUTER} | {
        "HOME": str(tmp_path / "home"), "TMPDIR": str(tmp), "PYTHONPATH": str(TESTS),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "run_tmp", "-p", "session_guard",
                           "-p", "no:cacheprovider", "--rootdir", str(tmp_path), "--no-leaks",
                           str(tmp_path / "test_sample.py")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "1 passed" in out, out
    assert re.search(rf"left outside the clone: {tmp}/ds4r\d+/tmp\w+", out), out
    assert not killed.exists() and live.is_dir() and other.is_dir(), sorted(os.listdir(tmp))
    assert sorted(os.listdir(tmp)) == sorted([live.name, other.name] + [e for e in os.listdir(tmp)
                                                                        if e.startswith("pytest-of-")])
