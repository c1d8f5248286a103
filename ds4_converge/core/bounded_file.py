"""Reading a file a person names (`--facts`, `engine.installer`, `front.keys`, a `health.warmup` prompt) or one of
the tool's own records: a regular file of bounded size, opened without blocking. A FIFO or a device is refused as
what it is, never waited on (`open` on a FIFO blocks until a writer comes; reading `/dev/zero` never ends); a file
larger than what its field can hold is refused before it is read, not read whole into memory. (The spec has its
own reader below this layer, `spec/loader.py`, with the same rule.)"""
from __future__ import annotations

import json
import os
import stat

from ds4_converge.core.file_kind import kind_of
from ds4_converge.units import human_bytes

MAX_RECORD_BYTES = 8 << 20  # the tool's own JSON records under paths.root (caches, pins, intent) are a few KiB


class FileRefused(OSError, ValueError):
    """Why a file is not read, in words after its path: "a FIFO, not a regular file", "3.0 GiB, more than …";
    `too_large`: a regular file over the bound (else: not a regular file). An OSError and a ValueError both, so
    that a reader that takes an unreadable or a malformed file for "none" takes this one so too."""

    def __init__(self, message: str, *, too_large: bool = False):
        super().__init__(message)
        self.too_large = too_large


def check_regular(st: os.stat_result, limit: int, holds: str) -> None:
    """Refuse a special file, or a regular one larger than `limit` bytes (what `holds` is: "a key file")."""
    if not stat.S_ISREG(st.st_mode):
        raise FileRefused(f"{kind_of(st.st_mode)}, not a regular file")
    if st.st_size > limit:
        raise FileRefused(f"{human_bytes(st.st_size)}, more than the {human_bytes(limit)} {holds} may hold",
                          too_large=True)


def check(path: str | os.PathLike, limit: int, holds: str) -> None:
    """:func:`check_regular` on what `path` names now (links followed), without opening it. OSError as raised."""
    check_regular(os.stat(path), limit, holds)


def read(path: str | os.PathLike, limit: int, holds: str) -> bytes:
    """The bytes of a regular file of at most `limit` bytes. FileRefused, or OSError as raised by open."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        check_regular(os.fstat(fd), limit, holds)
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, min(1 << 20, limit + 1 - size))):
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:  # it grew after fstat
            raise FileRefused(f"more than the {human_bytes(limit)} {holds} may hold", too_large=True)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_tail(path: str | os.PathLike, limit: int) -> bytes:
    """The last whole lines within `limit` bytes of a regular file that only grows (a log of records, appended to
    by every run): a file over the bound is not refused but read from its end, its first cut line left out.
    FileRefused for a special file, or OSError as raised by open."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileRefused(f"{kind_of(st.st_mode)}, not a regular file")
        start = max(st.st_size - limit, 0)
        os.lseek(fd, start, os.SEEK_SET)
        chunks, size = [], 0
        while size < limit and (chunk := os.read(fd, min(1 << 20, limit - size))):
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
        return data.split(b"\n", 1)[1] if start and b"\n" in data else data
    finally:
        os.close(fd)


def load_json(data: bytes | str):
    """json.loads, whose parser recurses once per nesting level: a document nested a few thousand deep is a
    ValueError that says so, never a RecursionError (an internal error)."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("nested too deep (thousands of levels): not a document this tool writes") from None


def read_json(path: str | os.PathLike, limit: int = MAX_RECORD_BYTES, holds: str = "a record of ds4-converge"):
    """A JSON document the tool wrote: read bounded and without blocking, parsed with the nesting bound."""
    return load_json(read(path, limit, holds))
