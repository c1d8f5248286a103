"""The facts executor tests use the one fake host (tests/fakehost.py); ``local`` is its /usr/local."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def local(fakehost) -> Path:
    """The tmp stand-in for ``/usr/local``."""
    return fakehost.local
