"""The real engine for the conformance suite: built once per session (and cached across sessions)."""
from __future__ import annotations

import pytest

import real_engine


@pytest.fixture(scope="session")
def engine() -> real_engine.RealEngine:
    """The upstream ds4 tree built with `make cpu`; the tests that need it skip only when the tarball is absent."""
    archive = real_engine.tarball()
    if archive is None:
        pytest.skip(f"no engine tarball (set {real_engine.TARBALL_ENV} or provide {real_engine.DEFAULT_TARBALL})")
    return real_engine.build(archive)


@pytest.fixture
def lock(tmp_path):
    """A DS4_LOCK_FILE of the test's own."""
    return tmp_path / "ds4.lock"
