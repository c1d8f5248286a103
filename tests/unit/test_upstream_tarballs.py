"""The upstream engine sources the real-engine tests build are in the repository (engine/upstream), with their
license and checksums, and tests/real_engine.py finds them there: a clone anywhere runs those tests."""
from __future__ import annotations

import hashlib
import os
import tarfile

import pytest

import real_engine

UPSTREAM = real_engine.REPO / "engine" / "upstream"


def test_every_tarball_matches_its_checksum():
    listed = dict(reversed(line.split()) for line in (UPSTREAM / "SHA256SUMS").read_text().splitlines())
    assert sorted(listed) == [f"antirez-ds4-{v}.tar.gz" for v in real_engine.VERSIONS]
    for name, digest in listed.items():
        assert hashlib.sha256((UPSTREAM / name).read_bytes()).hexdigest() == digest, name


def test_the_license_beside_them_is_the_one_inside_each():
    for version in real_engine.VERSIONS:
        with tarfile.open(UPSTREAM / f"antirez-ds4-{version}.tar.gz") as tar:
            inside = tar.extractfile(f"ds4-{version}/LICENSE").read().decode()
        assert inside == (UPSTREAM / "LICENSE").read_text() and inside.startswith("MIT License"), version


def test_the_tests_find_them_in_the_clone(monkeypatch):
    monkeypatch.delenv(real_engine.TARBALL_ENV, raising=False)
    if "DS4_ENGINE_DIR" not in os.environ:
        assert real_engine.ENGINES == UPSTREAM
    monkeypatch.setattr(real_engine, "ENGINES", UPSTREAM)
    for version in real_engine.VERSIONS:
        assert real_engine.require(version) == UPSTREAM / f"antirez-ds4-{version}.tar.gz"


def test_a_missing_tarball_is_an_error_that_says_where_it_was_looked_for(monkeypatch, tmp_path):
    monkeypatch.delenv(real_engine.TARBALL_ENV, raising=False)
    monkeypatch.setattr(real_engine, "ENGINES", tmp_path)
    with pytest.raises(FileNotFoundError) as missing:
        real_engine.require("b030961")
    assert str(tmp_path) in str(missing.value) and "engine/upstream" in str(missing.value)


def test_unpack_works_on_every_python_readme_allows(tmp_path):
    """The build cache unpacks a tarball only when it is empty (a clean clone, CI): Debian 12's Python 3.11.2 has no
    extraction filters, and unpack must not ask for one there."""
    source = tmp_path / "ds4-x"
    source.mkdir()
    (source / "Makefile").write_text("cpu:\n")
    archive = tmp_path / "x.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source, arcname="ds4-x")
    top = real_engine.unpack(archive, tmp_path / "out")
    assert top == tmp_path / "out" / "ds4-x" and (top / "Makefile").read_text() == "cpu:\n"
