"""One temporary folder per test run, so that a killed run leaves nothing for good.

Imported first by tests/conftest.py, before anything makes a temporary file: the run's controlling process makes
TMPDIR/ds4r<PID> and points TMPDIR (and tempfile) at it, so that every temporary file of the run — the tests'
own, pytest-xdist's workers' (which inherit TMPDIR), the CLI's, supervisord's, Ansible's — lands in it. pytest's
numbered folders stay where they were (PYTEST_DEBUG_TEMPROOT): a failed test's folder is kept for a look.

At its end the run removes its folder; what a test left in it is named by --no-leaks (tests/session_guard.py). A
run that was killed (SIGKILL, the OOM killer, a closed terminal) cannot clean up: the next run removes every
ds4r<PID> folder of this user whose PID no longer runs. SIGTERM ends a run as Ctrl-C does, with every fixture's
teardown (engines and supervisords stopped) and this cleanup.

PYTEST_DONT_REWRITE: conftest.py imports this module before pytest loads it as a plugin (it has no assert).
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

ENV = "DS4C_RUN_TMP"  # the run's folder, for its xdist workers and the subprocesses of its tests
PREFIX = "ds4r"  # short: unix sockets (supervisord's, ssh's control sockets) live below it, ~100 bytes at most
REAL_TMP = Path(os.environ.get("PYTEST_DEBUG_TEMPROOT") or tempfile.gettempdir())
LEFT: list[str] = []  # what the run left in its folder (session_guard's --no-leaks reports it)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep(tmp: Path = REAL_TMP) -> list[Path]:
    """Remove the folders of this user's killed runs (their PID no longer runs); the removed ones."""
    removed = []
    for entry in _listdir(tmp):
        match = re.fullmatch(rf"{PREFIX}(\d+)", entry)
        path = tmp / entry
        if not match or _alive(int(match.group(1))):
            continue
        try:
            if path.is_symlink() or path.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _listdir(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _own_folder() -> Path | None:
    """The controller's: made and pointed at once; a worker (or a test's subprocess) finds it in ENV."""
    if os.environ.get(ENV):
        return None
    sweep()
    folder = REAL_TMP / f"{PREFIX}{os.getpid()}"
    shutil.rmtree(folder, ignore_errors=True)  # a folder of an earlier process with this PID
    folder.mkdir(mode=0o700)
    folder.chmod(0o711)  # others may not list it, but may pass through: boxes.reachable_box is for another user
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", str(REAL_TMP))
    os.environ[ENV] = os.environ["TMPDIR"] = str(folder)
    tempfile.tempdir = None  # tempfile reads TMPDIR again
    return folder


FOLDER = _own_folder()


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config):
    # SIGTERM (a CI timeout, `kill`) ends the run as Ctrl-C does: teardowns run, and so does the cleanup below
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _interrupt)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    if FOLDER is None:
        return
    # the test caches (user_cache_guard.py) are removed by their own sessionfinish, which may run after this one
    LEFT.extend(str(FOLDER / entry) for entry in sorted(_listdir(FOLDER))
                if not entry.startswith("ds4c-test-caches-"))
    shutil.rmtree(FOLDER, ignore_errors=True)
