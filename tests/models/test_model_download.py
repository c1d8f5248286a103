"""fetch() against a loopback HTTP server and local files: resume, verify, refuse."""
import hashlib
import io
import os

import pytest
from rich.console import Console
from rich.progress import Progress

from ds4_converge.models.digests import DigestCache
from ds4_converge.models.download import (CHUNK_BYTES, ChecksumMismatch, DownloadError, InsufficientSpace, SizeMismatch, check_in_place, fetch, partial_path, progress_display)
from ds4_converge.spec.sources import HttpsSource, LocalSource

DATA = os.urandom(3 * 1024 * 1024 + 12345)  # several chunks, not a chunk multiple
SHA = hashlib.sha256(DATA).hexdigest()
PLENTY = lambda _dir: 1 << 50  # noqa: E731


@pytest.fixture
def served(file_server):
    file_server.files["/m/model.gguf"] = DATA
    return file_server


def fetch_served(server, dest, **kw):
    kw.setdefault("free_bytes_fn", PLENTY)
    return fetch(HttpsSource(server.url("/m/model.gguf")), dest, **kw)


def test_full_download_verifies_and_renames(served, tmp_path):
    dest = tmp_path / "gguf" / "model.gguf"
    result = fetch_served(served, dest, sha256=SHA, size=len(DATA))
    assert result.path == dest and result.sha256 == SHA and result.size == len(DATA)
    assert result.downloaded_bytes == len(DATA) and not result.resumed
    assert dest.read_bytes() == DATA
    assert not partial_path(dest).exists()
    assert "Range" not in served.requests[0].headers


def test_cut_midway_then_resume_transfers_only_the_rest(served, tmp_path):
    dest = tmp_path / "model.gguf"
    served.cut_after = 1_000_000
    with pytest.raises(DownloadError, match="interrupted") as info:
        fetch_served(served, dest, sha256=SHA, size=len(DATA))
    assert info.value.retryable and "resumes" in str(info.value)
    assert not dest.exists()
    kept = partial_path(dest).stat().st_size
    assert 1_000_000 - CHUNK_BYTES < kept <= 1_000_000  # at most the last short chunk is lost

    result = fetch_served(served, dest, sha256=SHA, size=len(DATA))
    second = served.requests[-1]
    assert second.headers["Range"] == f"bytes={kept}-"
    assert second.status == 206 and second.sent == len(DATA) - kept
    assert result.resumed and result.downloaded_bytes == len(DATA) - kept
    assert dest.read_bytes() == DATA and not partial_path(dest).exists()


def test_resume_without_expected_values_uses_server_length(served, tmp_path):
    dest = tmp_path / "model.gguf"
    served.cut_after = 2 * CHUNK_BYTES + 10
    with pytest.raises(DownloadError):
        fetch_served(served, dest)
    result = fetch_served(served, dest)
    assert result.sha256 == SHA and result.resumed


def test_server_ignoring_range_restarts_from_zero(served, tmp_path):
    dest = tmp_path / "model.gguf"
    partial_path(dest).write_bytes(DATA[:5000])
    served.ignore_range = True
    result = fetch_served(served, dest, sha256=SHA)
    assert served.requests[-1].status == 200
    assert not result.resumed and result.downloaded_bytes == len(DATA)
    assert dest.read_bytes() == DATA


def test_416_on_a_complete_partial_finishes_without_transfer(served, tmp_path):
    dest = tmp_path / "model.gguf"
    partial_path(dest).write_bytes(DATA)
    result = fetch_served(served, dest, sha256=SHA)  # no size given: fetch has to ask
    assert served.requests[-1].status == 416
    assert result.downloaded_bytes == 0 and result.sha256 == SHA and dest.read_bytes() == DATA


def test_complete_partial_with_known_size_needs_no_request(served, tmp_path):
    dest = tmp_path / "model.gguf"
    partial_path(dest).write_bytes(DATA)
    result = fetch_served(served, dest, sha256=SHA, size=len(DATA))
    assert served.requests == [] and result.downloaded_bytes == 0


def test_partial_longer_than_remote_file_starts_clean(served, tmp_path):
    dest = tmp_path / "model.gguf"
    partial_path(dest).write_bytes(DATA + b"junk")
    result = fetch_served(served, dest)
    assert [r.status for r in served.requests] == [416, 200]
    assert result.sha256 == SHA


def test_corrupted_bytes_fail_and_nothing_is_left_to_use(served, tmp_path):
    dest = tmp_path / "model.gguf"
    served.corrupt_at = 2_000_000
    with pytest.raises(ChecksumMismatch) as info:
        fetch_served(served, dest, sha256=SHA, size=len(DATA))
    assert isinstance(info.value, DownloadError) and not info.value.retryable
    assert f"expected {SHA}" in str(info.value) and "not used" in str(info.value)
    assert not dest.exists()
    assert not partial_path(dest).exists()  # a retry starts clean


def test_corrupted_resume_does_not_replace_a_good_old_file(served, tmp_path):
    dest = tmp_path / "model.gguf"
    dest.write_bytes(b"previous verified model")
    served.corrupt_at = 10
    with pytest.raises(ChecksumMismatch):
        fetch_served(served, dest, sha256=SHA)
    assert dest.read_bytes() == b"previous verified model"


def test_size_mismatch_is_caught_before_transfer(served, tmp_path):
    dest = tmp_path / "model.gguf"
    with pytest.raises(SizeMismatch, match=f"expected {len(DATA) + 1} bytes") as info:
        fetch_served(served, dest, size=len(DATA) + 1)
    assert info.value.actual == len(DATA)
    assert not dest.exists() and not partial_path(dest).exists()


def test_insufficient_space_says_the_numbers_and_writes_nothing(served, tmp_path):
    dest = tmp_path / "gguf" / "model.gguf"
    gib = 1024**3
    with pytest.raises(InsufficientSpace) as info:
        fetch_served(served, dest, size=len(DATA), free_bytes_fn=lambda _d: 512 * 1024**2, margin_bytes=gib)
    msg = str(info.value)
    assert "1.0 GiB margin" in msg and "3.0 MiB left to download" in msg
    assert "only 512.0 MiB free" in msg and str(dest.parent) in msg and "model.gguf" in msg
    assert info.value.needed == len(DATA) + gib
    assert served.requests == []  # checked before any request
    assert not dest.exists() and not partial_path(dest).exists()


def test_insufficient_space_counts_only_the_remaining_bytes(served, tmp_path):
    dest = tmp_path / "model.gguf"
    partial_path(dest).write_bytes(DATA[:3 * 1024 * 1024])
    free = len(DATA) - 3 * 1024 * 1024 + 100  # enough for the rest, not for the whole file
    result = fetch_served(served, dest, size=len(DATA), sha256=SHA, free_bytes_fn=lambda _d: free, margin_bytes=100)
    assert result.resumed


def test_insufficient_space_when_only_the_server_knows_the_size(served, tmp_path):
    dest = tmp_path / "model.gguf"
    with pytest.raises(InsufficientSpace, match="3.0 MiB left to download"):
        fetch_served(served, dest, free_bytes_fn=lambda _d: 1000, margin_bytes=0)
    assert not partial_path(dest).exists() and not dest.exists()


def test_http_errors_are_one_line_and_typed(file_server, tmp_path):
    with pytest.raises(DownloadError, match=r"not found: http://127\.0\.0\.1:\d+/nope\.gguf \(HTTP 404\)"):
        fetch(HttpsSource(file_server.url("/nope.gguf")), tmp_path / "x.gguf", free_bytes_fn=PLENTY)


@pytest.mark.parametrize("status, retryable", [(503, True), (429, True), (400, False)])
def test_server_errors_say_whether_a_retry_helps(served, tmp_path, status, retryable):
    served.statuses["/m/model.gguf"] = status
    with pytest.raises(DownloadError, match=f"HTTP {status}") as info:
        fetch_served(served, tmp_path / "model.gguf")
    assert info.value.retryable is retryable


def test_unreachable_server_is_retryable(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(DownloadError, match="cannot reach") as info:
        fetch(HttpsSource(f"http://127.0.0.1:{port}/m.gguf?sig=abc"), tmp_path / "m.gguf", free_bytes_fn=PLENTY)
    assert info.value.retryable and "sig=abc" not in str(info.value)


def test_progress_callable_sees_every_byte(served, tmp_path):
    seen = []
    fetch_served(served, tmp_path / "model.gguf", progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (len(DATA), len(DATA))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_rich_progress_task_completes(served, tmp_path):
    progress = Progress(console=Console(file=io.StringIO()))
    fetch_served(served, tmp_path / "model.gguf", progress=progress)
    (task,) = progress.tasks
    assert task.completed == task.total == len(DATA)


def test_no_progress_bar_in_json_mode_or_without_tty():
    with progress_display(json_mode=True, console=Console(force_terminal=True)) as p:
        assert p is None
    with progress_display(console=Console(file=io.StringIO())) as p:
        assert p is None
    with progress_display(console=Console(file=io.StringIO(), force_terminal=True)) as p:
        assert isinstance(p, Progress)


def test_cache_is_filled_so_the_next_check_does_not_hash(served, tmp_path, monkeypatch):
    cache = DigestCache(tmp_path / "digests.json")
    dest = tmp_path / "model.gguf"
    fetch_served(served, dest, sha256=SHA, cache=cache)
    import ds4_converge.models.digests as dc
    monkeypatch.setattr(dc, "sha256_file", lambda p: pytest.fail("hashed again"))
    assert check_in_place(dest, sha256=SHA, cache=cache) == (True, "sha256 verified (cached)", SHA)


def test_check_in_place_reasons(tmp_path):
    dest = tmp_path / "m.gguf"
    assert check_in_place(dest)[:2] == (False, "missing")
    dest.write_bytes(b"abc")
    assert check_in_place(dest, size=4)[:2] == (False, "size is 3 bytes, expected 4")
    assert check_in_place(dest, size=3)[:2] == (True, "present, size matches")
    ok, reason, _ = check_in_place(dest, sha256="0" * 64)
    assert not ok and reason.startswith("sha256 is ")


def test_local_copy_uses_the_same_protocol_and_resumes(tmp_path):
    src = tmp_path / "src" / "model.gguf"
    src.parent.mkdir()
    src.write_bytes(DATA)
    dest = tmp_path / "dst" / "model.gguf"
    dest.parent.mkdir()
    partial_path(dest).write_bytes(DATA[:777])
    result = fetch(LocalSource(str(src)), dest, sha256=SHA, free_bytes_fn=PLENTY)
    assert result.resumed and result.downloaded_bytes == len(DATA) - 777
    assert dest.read_bytes() == DATA


def test_local_source_that_is_the_destination_is_only_verified(tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(DATA)
    result = fetch(str(model), model, sha256=SHA)
    assert result.downloaded_bytes == 0 and result.sha256 == SHA
    with pytest.raises(DownloadError, match="sha256 is"):
        fetch(str(model), model, sha256="1" * 64)


def test_missing_local_source(tmp_path):
    with pytest.raises(DownloadError, match="cannot read local source"):
        fetch(str(tmp_path / "nope.gguf"), tmp_path / "out" / "nope.gguf", free_bytes_fn=PLENTY)


def test_bad_expected_sha256_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="64 hex digits"):
        fetch(str(tmp_path / "a.gguf"), tmp_path / "b.gguf", sha256="abc")
