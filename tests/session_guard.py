"""What CI asks of a whole run beyond passing: no test skipped (--no-skips) and nothing left outside the clone
(--no-leaks). .ci/run turns both on with DS4C_STRICT_RUN=1 (an environment variable, not PYTEST_ADDOPTS: the
pytests that tests and molecule's verifier start know no such options); `make test` prints every skip's reason
(-rs) either way.

--no-skips   a skip fails the run, naming the test and its reason, unless the test is in ALLOWED_SKIPS (tests that
             cannot run on a machine without a GPU; none today). On a machine `make test` set up
             (.ci/system-deps.sh), as CI's root, every test runs.
--no-leaks   the run fails when it left a new entry in the temporary folder or in the home folder (two levels:
             ~/.config/matplotlib, ~/.ansible/tmp), pytest's own numbered folders aside (pytest-of-USER: removed
             when the run passes, the last failed one kept; pyproject's tmp_path_retention_*).

Both verdicts are the controlling process's (with xdist, the workers' reports reach it), at the end of the session.
tests/conftest.py loads this plugin (pytest_plugins); a pytest of its own loads them with `-p session_guard`
(tests/unit/test_session_guard.py).
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

# node ids of tests that may skip in CI (a GPU-only test, say), each with why
ALLOWED_SKIPS: dict[str, str] = {}

_SKIPS: dict[str, str] = {}
_OUTSIDE_BEFORE: set[str] = set()


STRICT_ENV = "DS4C_STRICT_RUN"


def pytest_addoption(parser):
    strict = os.environ.get(STRICT_ENV) == "1"
    group = parser.getgroup("ds4-converge")
    group.addoption("--no-skips", action="store_true", default=strict,
                    help=f"fail the run when a test skips (CI; {STRICT_ENV}=1 turns it on)")
    group.addoption("--no-leaks", action="store_true", default=strict,
                    help=f"fail the run when it leaves something new in the temporary or the home folder (CI; "
                         f"{STRICT_ENV}=1 turns it on)")


def _controller(config) -> bool:
    return not hasattr(config, "workerinput")


def _temporary_folder() -> Path:
    """The host's temporary folder: where a run without run_tmp.py writes, and where one with it keeps its own."""
    run_tmp = sys.modules.get("run_tmp")
    return run_tmp.REAL_TMP if run_tmp else Path(tempfile.gettempdir())


def outside_entries() -> set[str]:
    """The temporary folder's entries and the home folder's, two levels deep (pytest's own numbered folders aside)."""
    found = set()
    tmp = _temporary_folder()
    for entry in _listdir(tmp):
        if not entry.startswith("pytest-of-"):
            found.add(str(tmp / entry))
    home = Path.home()
    for entry in _listdir(home):
        found.add(str(home / entry))
        if (home / entry).is_dir() and not (home / entry).is_symlink():
            found.update(str(home / entry / inner) for inner in _listdir(home / entry))
    return found


def _listdir(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def pytest_sessionstart(session):
    if _controller(session.config) and session.config.getoption("no_leaks"):
        _OUTSIDE_BEFORE.update(outside_entries())


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _SKIPS[report.nodeid] = reason


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if not _controller(config):
        return
    problems = []
    if config.getoption("no_skips"):
        problems += [f"skipped: {nodeid}: {reason}" for nodeid, reason in sorted(_SKIPS.items())
                     if nodeid not in ALLOWED_SKIPS]
    if config.getoption("no_leaks"):
        # the test caches folder (user_cache_guard) is removed by its own sessionfinish, which may run after this
        # one; a pytest without that plugin has none (importing it here would make one, which nobody removes)
        guard = sys.modules.get("user_cache_guard")
        left = sorted(outside_entries() - _OUTSIDE_BEFORE - ({str(guard.TEST_CACHES)} if guard else set()))
        run_tmp = sys.modules.get("run_tmp")  # what tests left in the run's own folder (removed just before)
        left += run_tmp.LEFT if run_tmp else []
        problems += [f"left outside the clone: {path}" for path in left]
    if problems:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        lines = ["--no-skips/--no-leaks: the run is not clean (tests/session_guard.py)", *problems]
        if reporter is not None:
            reporter.write_sep("=", "not clean", red=True)
            for line in lines:
                reporter.write_line(line)
        else:
            print("\n".join(lines))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
