"""Remember verified sha256 digests so a no-op run does not re-read 80 GB.

A digest is trusted while the file's (st_dev, st_ino, st_size, st_mtime_ns) are unchanged. Any write through
the file system moves mtime, a replaced file has a new inode, so a match means "the same bytes we hashed".
The cache file is disposable: unreadable or corrupt means empty.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from ds4_converge.errors import Ds4Error
from ds4_converge.core import bounded_file
from ds4_converge.core.learned import Digests

HASH_CHUNK = 8 * 1024 * 1024
_FORMAT_VERSION = 1
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


class DigestMismatch(Ds4Error, ValueError):
    def __init__(self, path: Path, expected: str, actual: str) -> None:
        self.path, self.expected, self.actual = path, expected, actual
        super().__init__(f"{path}: sha256 is {actual}, expected {expected}")


def stat_key(path: str | os.PathLike) -> str:
    st = os.stat(path)
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def hash_into(hasher, path: str | os.PathLike, on_bytes: Callable[[int], None] | None = None) -> int:
    """Feed a file's bytes into `hasher`; returns the byte count."""
    total = 0
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            hasher.update(chunk)
            total += len(chunk)
            if on_bytes:
                on_bytes(len(chunk))
    return total


def sha256_file(path: str | os.PathLike) -> str:
    hasher = hashlib.sha256()
    hash_into(hasher, path)
    return hasher.hexdigest()


class DigestCache:
    """JSON file: {"version": 1, "entries": {stat_key: {"sha256": ..., "path": ...}}}.

    `deferred`: what is remembered is kept in memory until :meth:`flush` (planning learns, it does not write).
    """

    def __init__(self, path: str | os.PathLike, *, deferred: bool = False) -> None:
        self.path = Path(path)
        self.deferred = deferred
        self._entries: dict[str, dict] | None = None
        self._dirty = False

    def lookup(self, path: str | os.PathLike) -> str | None:
        try:
            key = stat_key(path)
        except FileNotFoundError:
            return None
        entry = self._load().get(key)
        return entry["sha256"] if entry else None

    def remember(self, path: str | os.PathLike, sha256: str) -> None:
        key = stat_key(path)
        abs_path = os.path.abspath(path)
        entries = self._load()
        # one entry per path: the stale key of an older version of this file is dropped
        for stale in [k for k, e in entries.items() if e.get("path") == abs_path and k != key]:
            del entries[stale]
        entries[key] = {"sha256": sha256.lower(), "path": abs_path}
        self._dirty = True
        if not self.deferred:
            self.flush()

    def flush(self) -> None:
        if self._dirty:
            self._save(self._load())
            self._dirty = False

    def _load(self) -> dict[str, dict]:
        if self._entries is None:
            self._entries = _read_entries(self.path)
        return self._entries

    def _save(self, entries: dict[str, dict]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps({"version": _FORMAT_VERSION, "entries": entries}, indent=1, sort_keys=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _read_entries(path: Path) -> dict[str, dict]:
    try:
        data = bounded_file.read_json(path)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != _FORMAT_VERSION:
        return {}
    entries = data.get("entries")
    if not isinstance(entries, dict):
        return {}
    return {k: e for k, e in entries.items() if isinstance(e, dict) and isinstance(e.get("sha256"), str)}


def verified_sha256(path: str | os.PathLike, cache: Digests | None, expected: str | None = None) -> str:
    """The file's sha256, read from the cache when its stat key still matches, else hashed once and remembered.

    With `expected`, raise DigestMismatch when the digest differs (the true digest is still remembered,
    so the next run reports the same mismatch without re-reading the file).
    """
    digest = cache.lookup(path) if cache else None
    if digest is None:
        key_before = stat_key(path)
        digest = sha256_file(path)
        # a file that changed while we read it gets no cache entry
        if cache and stat_key(path) == key_before:
            cache.remember(path, digest)
    if expected is not None and digest != expected.lower():
        raise DigestMismatch(Path(path), expected.lower(), digest)
    return digest


def normalise_sha256(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip().lower().removeprefix("sha256:")
    if not _SHA256_RE.match(value):
        raise ValueError(f"expected sha256 must be 64 hex digits, got {value!r}")
    return value


def check_in_place(path: str | os.PathLike, *, sha256: str | None = None, size: int | None = None,
                   cache: Digests | None = None, need_digest: bool = False) -> tuple[bool, str, str | None]:
    """Is `path` already the wanted file? -> (ok, one-line reason, sha256 if computed or cached).

    Hashes only when a sha256 is expected (or need_digest) and the cache has no entry for the file as it is now.
    """
    path = Path(path)
    expected_sha = normalise_sha256(sha256)
    if not path.is_file():
        from ds4_converge.core.file_kind import what_is

        what = what_is(path)
        return False, what if what.startswith("missing") else f"{what}, not a regular file", None
    actual_size = path.stat().st_size
    if size is not None and actual_size != size:
        return False, f"size is {actual_size} bytes, expected {size}", None
    if expected_sha is None and not need_digest:
        return True, "present" + (", size matches" if size is not None else ", nothing to verify against"), None
    cached = cache.lookup(path) if cache else None
    digest = cached or verified_sha256(path, cache)
    how = "cached" if cached else "hashed"
    if expected_sha and digest != expected_sha:
        return False, f"sha256 is {digest}, expected {expected_sha}", digest
    return True, f"sha256 verified ({how})", digest
