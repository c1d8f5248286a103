import hashlib
import json
import os

import pytest

import ds4_converge.models.digests as dc
from ds4_converge.models.digests import DigestCache, DigestMismatch, verified_sha256


@pytest.fixture
def hash_calls(monkeypatch):
    """Count real hashing work: every sha256_file call reads the whole file."""
    calls = []
    real = dc.sha256_file

    def counting(path):
        calls.append(path)
        return real(path)

    monkeypatch.setattr(dc, "sha256_file", counting)
    return calls


def test_miss_hashes_and_remembers_then_hit_does_not_rehash(tmp_path, hash_calls):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"abc" * 1000)
    cache = DigestCache(tmp_path / "state" / "digests.json")
    digest = verified_sha256(model, cache)
    assert digest == hashlib.sha256(b"abc" * 1000).hexdigest()
    assert len(hash_calls) == 1
    # a new process: a fresh cache object reading the same file
    assert verified_sha256(model, DigestCache(tmp_path / "state" / "digests.json")) == digest
    assert len(hash_calls) == 1


def test_trust_is_bound_to_the_stat_key(tmp_path, hash_calls):
    """Same size, same mtime, different bytes: the cache (by design) answers without reading the file."""
    model = tmp_path / "m.gguf"
    model.write_bytes(b"a" * 100)
    cache = DigestCache(tmp_path / "digests.json")
    old = verified_sha256(model, cache)
    st = model.stat()
    with open(model, "r+b") as f:  # same inode, same size
        f.write(b"b")
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert verified_sha256(model, cache) == old
    assert len(hash_calls) == 1


def test_mtime_change_invalidates(tmp_path, hash_calls):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"a" * 100)
    cache = DigestCache(tmp_path / "digests.json")
    verified_sha256(model, cache)
    st = model.stat()
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert cache.lookup(model) is None
    verified_sha256(model, cache)
    assert len(hash_calls) == 2


def test_replaced_file_is_a_miss_and_stale_entries_are_dropped(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"one")
    cache_file = tmp_path / "digests.json"
    cache = DigestCache(cache_file)
    verified_sha256(model, cache)
    new = tmp_path / "new"
    new.write_bytes(b"two")
    os.replace(new, model)  # new inode
    assert cache.lookup(model) is None
    assert verified_sha256(model, cache) == hashlib.sha256(b"two").hexdigest()
    assert len(json.loads(cache_file.read_text())["entries"]) == 1


def test_expected_mismatch_raises_and_still_remembers(tmp_path, hash_calls):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"x")
    cache = DigestCache(tmp_path / "digests.json")
    with pytest.raises(DigestMismatch, match="expected " + "0" * 64):
        verified_sha256(model, cache, expected="0" * 64)
    with pytest.raises(DigestMismatch):
        verified_sha256(model, cache, expected="0" * 64)
    assert len(hash_calls) == 1


def test_corrupt_cache_file_counts_as_empty(tmp_path):
    cache_file = tmp_path / "digests.json"
    cache_file.write_text("{not json")
    model = tmp_path / "m.gguf"
    model.write_bytes(b"x")
    cache = DigestCache(cache_file)
    assert cache.lookup(model) is None
    verified_sha256(model, cache)
    assert DigestCache(cache_file).lookup(model) == hashlib.sha256(b"x").hexdigest()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_missing_file_is_a_miss(tmp_path):
    assert DigestCache(tmp_path / "d.json").lookup(tmp_path / "nope") is None
