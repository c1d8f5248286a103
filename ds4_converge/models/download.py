"""Explicit, resumable, verified model downloads.

Protocol for every source (hf://, https://, local path):
  1. bytes go to `<dest>.partial`; an existing partial is resumed (HTTP Range from its size);
  2. the sha256 is computed while streaming (a resumed partial's bytes are hashed once first), so an
     80 GB file is never read a second time;
  3. size and sha256 are checked, then the partial is fsynced and renamed onto `<dest>` atomically.
So `<dest>` only ever holds a complete, verified file: the engine never sees a partial one.

hf:// goes through the same HTTP code path as https:// (URL and headers from huggingface_hub), because
huggingface_hub's own downloader does not reliably resume (antirez/ds4 PR #1048) and cannot hash while
streaming. The token only ever lives in a request header: never in messages, logs or reprs. huggingface_hub
comes with the `download` extra (HUB_EXTRA), imported only for an hf:// source.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests
import urllib3
from pydantic import SecretStr

from ds4_converge.models.placement import HUB_EXTRA
from ds4_converge.core.learned import Digests
from ds4_converge.models.digests import check_in_place, hash_into, normalise_sha256, verified_sha256
from ds4_converge.errors import Ds4Error
from ds4_converge.units import human_bytes
from ds4_converge.spec.sources import HttpsSource, LocalSource, Source, parse_source
from ds4_converge.core.crashpoints import crash_point

CHUNK_BYTES = 256 * 1024  # also the most a cut connection can cost: a short last chunk is lost
DEFAULT_MARGIN_BYTES = 1024**3
HTTP_TIMEOUT_S = (30, 120)  # connect, read (between bytes)
PARTIAL_SUFFIX = ".partial"
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")

ProgressCallback = Callable[[int, "int | None"], None]


# ---------------------------------------------------------------------------------------------- errors

def hub():
    """huggingface_hub, for hf:// sources only: the `download` extra (make run installs only what a run needs)."""
    try:
        import huggingface_hub
    except ImportError:
        raise DownloadError(f"hf:// sources need huggingface_hub, which the `download` extra installs: "
                            f"{HUB_EXTRA}") from None
    return huggingface_hub


class DownloadError(Ds4Error):
    """A one-line human message. `retryable`: the partial file is kept and the next run resumes it."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class InsufficientSpace(DownloadError):
    def __init__(self, *, path: Path, name: str, remaining: int, margin: int, free: int) -> None:
        self.path, self.remaining, self.margin, self.free = path, remaining, margin, free
        self.needed = remaining + margin
        super().__init__(
            f"not enough free space for {name} in {path}: need {human_bytes(self.needed)} "
            f"({human_bytes(remaining)} left to download + {human_bytes(margin)} margin), "
            f"only {human_bytes(free)} free"
        )


class SizeMismatch(DownloadError):
    def __init__(self, what: str, expected: int, actual: int, *, retryable: bool = False) -> None:
        self.expected, self.actual = expected, actual
        super().__init__(f"{what}: size is {actual} bytes ({human_bytes(actual)}), expected {expected} bytes "
                         f"({human_bytes(expected)})", retryable=retryable)


class ChecksumMismatch(DownloadError):
    def __init__(self, what: str, expected: str, actual: str) -> None:
        self.expected, self.actual = expected, actual
        super().__init__(f"{what}: sha256 is {actual}, expected {expected}; the file was not used")


@dataclass(frozen=True)
class FetchResult:
    path: Path
    sha256: str
    size: int
    downloaded_bytes: int
    resumed: bool


def partial_path(dest: str | os.PathLike) -> Path:
    dest = Path(dest)
    return dest.with_name(dest.name + PARTIAL_SUFFIX)


def default_free_bytes(directory: Path) -> int:
    return shutil.disk_usage(directory).free


# ------------------------------------------------------------------------------------------- progress

@contextmanager
def progress_display(*, json_mode: bool = False, console=None):
    """A started rich Progress (bar, size, rate, ETA) on a terminal; None in --json mode or without a TTY."""
    from rich.console import Console
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                               TransferSpeedColumn)

    console = console or Console(stderr=True)
    if json_mode or not console.is_terminal:
        yield None
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), console=console) as progress:
        yield progress


class _Reporter:
    """Adapts `progress` (None, a rich Progress, or a callable(done, total)) to advance(n)."""

    def __init__(self, progress, description: str, total: int | None, done: int) -> None:
        self._progress, self._total, self._done = progress, total, done
        self._task = None
        if progress is not None and hasattr(progress, "add_task"):
            self._task = progress.add_task(description, total=total, completed=done)

    def advance(self, n: int) -> None:
        self._done += n
        if self._task is not None:
            self._progress.advance(self._task, n)
        elif self._progress is not None:
            self._progress(self._done, self._total)


# ------------------------------------------------------------------------------------- secrets in text

def _scrub(text: str, token: SecretStr | None) -> str:
    """Remove the token and URL query strings (signed CDN URLs) from text that came from a library."""
    if token is not None and token.get_secret_value():
        text = text.replace(token.get_secret_value(), "***")
    return re.sub(r"\?[^\s'\")]*=[^\s'\")]*", "?…", text)


def _resolve_token(token: str | SecretStr | None) -> SecretStr | None:
    if isinstance(token, SecretStr):
        return token if token.get_secret_value() else None
    value = token or hub().get_token()  # HF_TOKEN, then huggingface_hub's token file
    return SecretStr(value) if value else None


# ------------------------------------------------------------------------------------------ openers

@dataclass
class _Body:
    start: int                 # file offset of the first byte delivered (0: the server sent everything)
    total: int | None          # full file size, when the server says
    remote_sha256: str | None  # the Hub's LFS sha256 (X-Linked-Etag), when there is one
    chunks: Iterator[bytes]
    close: Callable[[], None]


@dataclass
class _AlreadyComplete:
    """HTTP 416 for `Range: bytes=<partial size>-`: the partial may already hold the whole file."""
    total: int | None


class _HttpOpener:
    def __init__(self, session: requests.Session, url: str, headers: dict, display: str,
                 token: SecretStr | None, trust_linked_etag: bool) -> None:
        self.session, self.url, self.headers, self.display = session, url, headers, display
        self.token, self.trust_linked_etag = token, trust_linked_etag

    def __call__(self, offset: int) -> _Body | _AlreadyComplete:
        headers = {**self.headers, "Accept-Encoding": "identity"}  # byte offsets must be file offsets
        if offset:
            headers["Range"] = f"bytes={offset}-"
        try:
            resp = self.session.get(self.url, headers=headers, stream=True, timeout=HTTP_TIMEOUT_S)
        except requests.RequestException as exc:
            # `from None`: the requests exception carries the prepared request, Authorization header included
            raise DownloadError(f"cannot reach {self.display}: {_scrub(str(exc), self.token)}",
                                retryable=True) from None
        if resp.status_code == 416:
            resp.close()
            return _AlreadyComplete(_content_range(resp.headers.get("Content-Range"))[1])
        if resp.status_code not in (200, 206):
            resp.close()
            raise self._status_error(resp.status_code)
        return self._body(resp, offset)

    def _body(self, resp: requests.Response, offset: int) -> _Body:
        if resp.status_code == 206:
            start, total = _content_range(resp.headers.get("Content-Range"))
            if start != offset:
                resp.close()
                raise DownloadError(f"{self.display}: asked for bytes from {offset}, the server sent from {start}",
                                    retryable=True)
        else:  # 200: the server ignored Range (or none was sent) and sends the whole file
            start, length = 0, resp.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
        remote_sha = _linked_sha256(resp) if self.trust_linked_etag else None
        return _Body(start, total, remote_sha, resp.iter_content(CHUNK_BYTES), resp.close)

    def _status_error(self, status: int) -> DownloadError:
        if status in (401, 403):
            hint = "a token was sent but lacks access" if self.token else "no token found (set HF_TOKEN or log in)"
            return DownloadError(f"access denied to {self.display} (HTTP {status}): the repo may be gated or "
                                 f"private; {hint}")
        if status == 404:
            return DownloadError(f"not found: {self.display} (HTTP 404): check repo, file name and revision")
        retryable = status == 429 or status >= 500
        return DownloadError(f"{self.display}: HTTP {status}", retryable=retryable)


def _content_range(value: str | None) -> tuple[int, int | None]:
    """'bytes 100-999/1000' -> (100, 1000); 'bytes */1000' -> (0, 1000); '/*' -> total None."""
    match = re.match(r"bytes\s+(?:(\d+)-\d+|\*)/(\d+|\*)", value or "")
    if not match:
        return 0, None
    start, total = match.groups()
    return int(start or 0), (int(total) if total != "*" else None)


def _linked_sha256(resp: requests.Response) -> str | None:
    # the Hub's resolve answer (often the redirect, before the CDN) carries the LFS object's sha256
    for r in [*resp.history, resp]:
        etag = r.headers.get("X-Linked-Etag", "").removeprefix("W/").strip('"').lower()
        if _SHA256_RE.match(etag):
            return etag
    return None


def _local_opener(src: Path) -> Callable[[int], _Body | _AlreadyComplete]:
    def open_at(offset: int) -> _Body | _AlreadyComplete:
        try:
            f = open(src, "rb")
        except OSError as exc:
            raise DownloadError(f"cannot read local source {src}: {exc.strerror}") from None
        total = os.fstat(f.fileno()).st_size
        if offset and offset >= total:  # same answer an HTTP server gives: 416
            f.close()
            return _AlreadyComplete(total)
        f.seek(offset)
        return _Body(offset, total, None, iter(lambda: f.read(CHUNK_BYTES), b""), f.close)

    return open_at


# ------------------------------------------------------------------------------------------- the job

class _Fetch:
    def __init__(self, opener, display: str, name: str, dest: Path, *, sha256, size, free_bytes_fn,
                 margin_bytes, progress, cache, token) -> None:
        self.open_at, self.display, self.name, self.dest = opener, display, name, dest
        self.partial = partial_path(dest)
        self.expected_sha, self.expected_size = sha256, size
        self.free_bytes_fn, self.margin, self.progress = free_bytes_fn, margin_bytes, progress
        self.cache, self.token = cache, token
        self.declared_total: int | None = None
        self.remote_sha: str | None = None

    def run(self, *, restarted: bool = False) -> FetchResult:
        offset = self._usable_partial_size()
        if self.expected_size is not None:
            self._check_space(self.expected_size - offset)
        hasher = self._hash_partial(offset)
        if offset and offset == self.expected_size:
            return self._finish(hasher, downloaded=0, resumed=True)
        body = self.open_at(offset)
        if isinstance(body, _AlreadyComplete):
            return self._complete_or_restart(body, hasher, offset, restarted)
        try:
            if offset and body.start == 0:
                offset, hasher = 0, hashlib.sha256()  # the server ignored Range: restart from zero
                self.partial.unlink(missing_ok=True)
            self._take_declarations(body)
            if body.total is not None:
                self._check_space(body.total - offset)
            downloaded = self._stream(body, hasher, offset)
        finally:
            body.close()
        return self._finish(hasher, downloaded, resumed=offset > 0)

    def _complete_or_restart(self, answer: _AlreadyComplete, hasher, offset: int, restarted: bool) -> FetchResult:
        if offset and answer.total in (None, offset):
            self.declared_total = answer.total
            return self._finish(hasher, downloaded=0, resumed=True)
        if restarted:
            raise DownloadError(f"{self.display}: the server refuses the byte range requests")
        self.partial.unlink(missing_ok=True)  # partial longer than the remote file: start clean
        return self.run(restarted=True)

    def _usable_partial_size(self) -> int:
        try:
            size = self.partial.stat().st_size
        except FileNotFoundError:
            return 0
        if self.expected_size is not None and size > self.expected_size:
            self.partial.unlink()  # cannot be a prefix of the expected file
            return 0
        return size

    def _check_space(self, remaining: int) -> None:
        free = self.free_bytes_fn(self.dest.parent)
        if free < remaining + self.margin:
            raise InsufficientSpace(path=self.dest.parent, name=self.name, remaining=remaining,
                                    margin=self.margin, free=free)

    def _hash_partial(self, offset: int):
        hasher = hashlib.sha256()
        if offset:
            reporter = _Reporter(self.progress, f"checking {self.partial.name}", offset, 0)
            hash_into(hasher, self.partial, reporter.advance)
        return hasher

    def _take_declarations(self, body: _Body) -> None:
        """Fail before transferring anything when the server already tells us the file is not the one wanted."""
        self.declared_total, self.remote_sha = body.total, body.remote_sha256
        if self.expected_size is not None and body.total is not None and body.total != self.expected_size:
            raise SizeMismatch(f"{self.display} (as reported by the server)", self.expected_size, body.total)
        if self.expected_sha and self.remote_sha and self.remote_sha != self.expected_sha:
            raise ChecksumMismatch(f"{self.display} (as reported by the Hub)", self.expected_sha, self.remote_sha)

    def _stream(self, body: _Body, hasher, offset: int) -> int:
        reporter = _Reporter(self.progress, self.name, body.total, offset)
        received = 0
        with open(self.partial, "ab" if offset else "wb") as f:
            chunks = iter(body.chunks)
            while True:
                try:
                    chunk = next(chunks)
                except StopIteration:
                    break
                except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
                    raise self._interrupted(offset + received, body.total, exc) from None
                f.write(chunk)
                hasher.update(chunk)
                received += len(chunk)
                reporter.advance(len(chunk))
        return received

    def _interrupted(self, have: int, total: int | None, exc: Exception) -> DownloadError:
        of_total = f" of {human_bytes(total)}" if total else ""
        return DownloadError(f"download of {self.display} interrupted at {human_bytes(have)}{of_total} "
                             f"({_scrub(str(exc), self.token)}); {self.partial.name} is kept and the next run "
                             f"resumes it", retryable=True)

    def _finish(self, hasher, downloaded: int, resumed: bool) -> FetchResult:
        actual_size = self.partial.stat().st_size
        self._verify_size(actual_size)
        digest = hasher.hexdigest()
        for expected, what in ((self.expected_sha, self.display), (self.remote_sha, f"{self.display} (Hub sha256)")):
            if expected and digest != expected:
                self.partial.unlink(missing_ok=True)  # corrupt bytes: the retry starts clean
                raise ChecksumMismatch(what, expected, digest)
        crash_point("model-partial")
        _durable_replace(self.partial, self.dest)
        if self.cache is not None:
            self.cache.remember(self.dest, digest)
        return FetchResult(self.dest, digest, actual_size, downloaded, resumed)

    def _verify_size(self, actual: int) -> None:
        wanted = self.expected_size if self.expected_size is not None else self.declared_total
        if wanted is None or actual == wanted:
            return
        if actual > wanted:
            self.partial.unlink(missing_ok=True)
        raise SizeMismatch(self.display, wanted, actual, retryable=actual < wanted)


def _durable_replace(partial: Path, dest: Path) -> None:
    with open(partial, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(partial, dest)
    dir_fd = os.open(dest.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


# ---------------------------------------------------------------------------------------------- API

def fetch(source: Source | str, dest_path: str | os.PathLike, *, sha256: str | None = None,
          size: int | None = None, free_bytes_fn: Callable[[Path], int] = default_free_bytes,
          margin_bytes: int = DEFAULT_MARGIN_BYTES, progress=None, token: str | SecretStr | None = None,
          session: requests.Session | None = None, cache: Digests | None = None) -> FetchResult:
    """Download (or copy) `source` to `dest_path`, resuming `<dest>.partial`, verifying size and sha256.

    progress: None, a rich Progress (see progress_display) or a callable(done_bytes, total_bytes|None).
    token: hf:// only; default huggingface_hub.get_token() (HF_TOKEN, then the token file).
    cache: when given, the verified digest of the result is remembered (no-op runs skip hashing).
    Raises DownloadError (InsufficientSpace, SizeMismatch, ChecksumMismatch are subclasses).
    """
    source = parse_source(source) if isinstance(source, str) else source
    dest = Path(dest_path)
    expected_sha = normalise_sha256(sha256)
    if size is not None and size < 0:
        raise ValueError(f"expected size must be >= 0, got {size}")
    if isinstance(source, LocalSource) and _same_file(Path(source.path), dest):
        return _verify_in_place(dest, expected_sha, size, cache)
    dest.parent.mkdir(parents=True, exist_ok=True)
    own_session = session is None
    session = session or requests.Session()
    try:
        opener, secret = _opener_for(source, session, token)
        job = _Fetch(opener, str(source), source.name, dest, sha256=expected_sha, size=size,
                     free_bytes_fn=free_bytes_fn, margin_bytes=margin_bytes, progress=progress, cache=cache,
                     token=secret)
        return job.run()
    finally:
        if own_session:
            session.close()


def _opener_for(source: Source, session: requests.Session, token) -> tuple[Callable, SecretStr | None]:
    if isinstance(source, LocalSource):
        return _local_opener(Path(source.path)), None
    if isinstance(source, HttpsSource):
        return _HttpOpener(session, source.url, {}, source.display, None, trust_linked_etag=False), None
    huggingface_hub = hub()
    from huggingface_hub.utils import build_hf_headers

    secret = _resolve_token(token)
    url = huggingface_hub.hf_hub_url(source.repo, source.filename, revision=source.revision,
                                     endpoint=os.environ.get("HF_ENDPOINT") or None)  # read now, not at import time
    headers = build_hf_headers(token=secret.get_secret_value() if secret else False,
                               library_name="ds4-converge", library_version=_own_version())
    return _HttpOpener(session, url, headers, str(source), secret, trust_linked_etag=True), secret


def _own_version() -> str:
    try:
        return importlib.metadata.version("ds4-converge")
    except importlib.metadata.PackageNotFoundError:
        return "dev"


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _verify_in_place(path: Path, expected_sha: str | None, size: int | None,
                     cache: Digests | None) -> FetchResult:
    """The local source already is the destination: nothing to copy, only to verify."""
    ok, reason, digest = check_in_place(path, sha256=expected_sha, size=size, cache=cache, need_digest=True)
    if not ok:
        raise DownloadError(f"{path}: {reason}")
    return FetchResult(path, digest, path.stat().st_size, 0, False)
