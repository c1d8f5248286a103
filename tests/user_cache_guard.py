"""The user's own cache folder (receipt.user_cache: the no-op receipts) is never the tests' business.

Every test gets a cache folder of its own through XDG_CACHE_HOME (its in-process CLI calls and every subprocess
inherit it), and a test that changes the real one anyway (an environment built from scratch, a HOME of its own)
fails in its teardown, naming what it touched. Tools that write into the home folder on their own get a folder
under the same temporary one. tests/conftest.py registers these hooks; a pytest of its own loads
them with `-p user_cache_guard` (tests/unit/test_test_isolation.py).
"""
from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from pathlib import Path

import pytest

REAL_USER_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ds4-converge"
TEST_CACHES = Path(tempfile.mkdtemp(prefix="ds4c-test-caches-"))
os.environ["XDG_CACHE_HOME"] = str(TEST_CACHES / "collection")  # what runs before the first test's setup
# and the tools that write into the home folder on their own (tests/session_guard.py --no-leaks checks): matplotlib's
# font cache (the bench --plot tests), Ansible's local and remote temporary folders (the loopback ssh "hosts" are
# this machine)
os.environ["MPLCONFIGDIR"] = str(TEST_CACHES / "matplotlib")
os.environ["ANSIBLE_HOME"] = str(TEST_CACHES / "ansible")
os.environ["ANSIBLE_LOCAL_TEMP"] = str(TEST_CACHES / "ansible" / "tmp")
os.environ["ANSIBLE_REMOTE_TEMP"] = str(TEST_CACHES / "ansible" / "remote-tmp")
_TEST_NUMBER = itertools.count()


def cache_snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every entry under `folder` with its size and mtime: what a write, a new file or a removal changes."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            found[os.path.relpath(path, folder)] = (st.st_size, st.st_mtime_ns)
    return found


_BEFORE = cache_snapshot(REAL_USER_CACHE)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # a hook, not an autouse fixture: hypothesis refuses function-scoped fixtures around its examples
    own = TEST_CACHES / f"{next(_TEST_NUMBER)}-{item.name[:60].replace('/', '_')}"
    own.mkdir()
    os.environ["XDG_CACHE_HOME"] = str(own)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    now = cache_snapshot(REAL_USER_CACHE)
    if now != _BEFORE:
        touched = sorted(k for k in now.keys() | _BEFORE.keys() if now.get(k) != _BEFORE.get(k))
        _BEFORE.clear()
        _BEFORE.update(now)  # the next test is judged on its own writes
        pytest.fail(f"{item.nodeid} changed the user's own cache {REAL_USER_CACHE}: {touched[:5]}", pytrace=False)


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(TEST_CACHES, ignore_errors=True)
