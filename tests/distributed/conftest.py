"""The real b030961 engine and sparse slice models for the distributed tests."""
from __future__ import annotations

import pytest

import real_engine
from distributed import slice_gguf


@pytest.fixture(scope="session")
def engine_b030961() -> real_engine.RealEngine:
    """Upstream b030961 (`make cpu`, cached like tests/conformance's fixture of the same name)."""
    return real_engine.built("b030961")


@pytest.fixture(scope="session")
def worker_model(tmp_path_factory):
    """The tensors of layers 42:output (sparse: a few KB on disk)."""
    return slice_gguf.write(tmp_path_factory.mktemp("slice") / "flash-42-output.gguf", "42:output")


@pytest.fixture(scope="session")
def coordinator_model(tmp_path_factory):
    """The tensors of layers 0:41 with the token embedding (sparse)."""
    return slice_gguf.write(tmp_path_factory.mktemp("slice") / "flash-0-41.gguf", "0:41")
