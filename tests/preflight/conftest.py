"""Fixtures for preflight tests: a FakeHost whose tools are first on PATH for every CLI run of the test."""
from __future__ import annotations

import os

import pytest

from fakehost import FakeHost


@pytest.fixture
def fake(tmp_path, monkeypatch) -> FakeHost:
    made = FakeHost(tmp_path / "fakehost")
    monkeypatch.setenv("PATH", made.environ_path(os.environ["PATH"]))
    for name in ("CUDA_HOME", "NVCC", "CUDA_PATH", "LD_LIBRARY_PATH"):
        monkeypatch.delenv(name, raising=False)
    return made
