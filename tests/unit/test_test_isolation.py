"""The tests keep out of the user's own cache folder (tests/user_cache_guard.py): each test has its own XDG_CACHE_HOME, and
a test that writes into the real ~/.cache/ds4-converge anyway fails."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from user_cache_guard import REAL_USER_CACHE, TEST_CACHES

OUTER = ("XDG_CACHE_HOME", "PYTEST_DEBUG_TEMPROOT", "DS4C_RUN_TMP")  # the outer run's (tests/run_tmp.py)

from ds4_converge.orchestrate import receipt

TESTS = Path(__file__).resolve().parents[1]

SEEN: list[str] = []


def test_each_test_has_a_cache_folder_of_its_own():
    own = Path(os.environ["XDG_CACHE_HOME"])
    assert own.parent == TEST_CACHES and own.is_dir()
    assert Path(receipt.user_cache()) == own / "ds4-converge" != REAL_USER_CACHE
    SEEN.append(str(own))


def test_the_next_test_has_another():
    assert SEEN and os.environ["XDG_CACHE_HOME"] not in SEEN


@pytest.mark.slow  # pytest in a subprocess
def test_a_test_that_writes_into_the_real_cache_fails(tmp_path):
    """The guard itself, in a pytest of its own whose 'real' cache is a scratch HOME's."""
    (tmp_path / "test_writes.py").write_text(
        "from pathlib import Path\n"
        "def test_writes_where_it_should():\n"
        "    import os; Path(os.environ['XDG_CACHE_HOME'], 'ds4-converge').mkdir()\n"
        "def test_writes_into_the_users_cache():\n"
        "    (Path.home() / '.cache' / 'ds4-converge' / 'noop').mkdir(parents=True)\n"
        "def test_after_it():\n"
        "    pass\n")
    env = {k: v for k, v in os.environ.items() if k not in OUTER} | {
        "HOME": str(tmp_path / "home"), "PYTHONPATH": str(TESTS), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "user_cache_guard", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_writes.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "3 passed, 1 error" in out, out  # the teardown error is its own line
    assert f"test_writes_into_the_users_cache changed the user's own cache {tmp_path}/home/.cache/ds4-converge" in out
    assert "['noop']" in out, out
