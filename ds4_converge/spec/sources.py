"""Where a model file comes from: a typed, validated source value. Pure: no I/O.

Accepted forms:
  hf://ORG/REPO/FILE[@REVISION]   a file in a Hugging Face repo (FILE may sit in a subfolder)
  https://host/path/FILE          any HTTPS server (plain http:// only on loopback: tests, local mirrors)
  /some/path/FILE (or relative)   a local file, copied with the same verify-then-rename protocol

Files are named exactly: a `*` or `?` in a file name is an error, never a pattern.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import unquote, urlsplit

HF_SCHEME = "hf://"
DEFAULT_REVISION = "main"
_GLOB_CHARS = ("*", "?")
_LOOPBACK_NAMES = {"localhost"}


def _reject_glob(name: str, what: str) -> None:
    if any(ch in name for ch in _GLOB_CHARS):
        raise ValueError(f"{what} {name!r} contains '*' or '?': model files are named exactly, patterns are not supported")


def _check_relative_file_path(path: str, what: str) -> None:
    parts = path.split("/")
    if not path or any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"{what} {path!r} is not a plain file path (empty, '.' or '..' component)")
    _reject_glob(path, what)


@dataclass(frozen=True)
class HfSource:
    """`filename` is the path inside the repo; it may include a subfolder (`name` is its last part)."""

    repo: str
    filename: str
    revision: str = DEFAULT_REVISION

    def __post_init__(self) -> None:
        owner, sep, name = self.repo.partition("/")
        if not (owner and sep and name) or "/" in name:
            raise ValueError(f"Hugging Face repo {self.repo!r} must look like ORG/REPO")
        _reject_glob(self.repo, "Hugging Face repo")
        _check_relative_file_path(self.filename, "file name")
        if not self.revision:
            raise ValueError("empty revision after '@'")

    @property
    def name(self) -> str:
        return PurePosixPath(self.filename).name

    def __str__(self) -> str:
        return f"{HF_SCHEME}{self.repo}/{self.filename}@{self.revision}"


@dataclass(frozen=True)
class HttpsSource:
    url: str

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError(f"{self.display} is not an https:// URL")
        if parts.scheme == "http" and not _is_loopback(parts.hostname):
            raise ValueError(f"{self.display}: plain http:// is only accepted for loopback addresses; use https://")
        if not self.name:
            raise ValueError(f"{self.display} does not name a file")
        _reject_glob(self.name, "file name")

    @property
    def name(self) -> str:
        return PurePosixPath(unquote(urlsplit(self.url).path)).name

    @property
    def filename(self) -> str:
        return self.name

    @property
    def display(self) -> str:
        # query strings and user:password@ often carry signatures or credentials: never print them
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}{parts.path}"

    def __str__(self) -> str:
        return self.display

    def __repr__(self) -> str:
        return f"HttpsSource(url={self.display!r})"


@dataclass(frozen=True)
class LocalSource:
    path: str

    def __post_init__(self) -> None:
        if not self.path:
            raise ValueError("empty local model path")
        _reject_glob(self.path, "local path")
        if not self.name or self.path.endswith("/"):
            raise ValueError(f"local path {self.path!r} does not name a file")

    @property
    def name(self) -> str:
        return PurePosixPath(self.path).name

    @property
    def filename(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.path


Source = HfSource | HttpsSource | LocalSource


def parse_source(value: str) -> Source:
    """Turn a spec string into a typed source; ValueError with a one-line reason when it is not usable."""
    value = value.strip()
    if value.startswith(HF_SCHEME):
        return _parse_hf(value[len(HF_SCHEME):])
    if value.startswith(("https://", "http://")):
        return HttpsSource(value)
    if "://" in value:
        raise ValueError(f"unsupported source {value!r}: use hf://ORG/REPO/FILE[@REVISION], https://… or a local path")
    return LocalSource(value)


def _parse_hf(rest: str) -> HfSource:
    path, at, revision = rest.rpartition("@") if "@" in rest else (rest, "", DEFAULT_REVISION)
    parts = path.split("/")
    if len(parts) < 3:
        raise ValueError(f"hf://{rest} must look like hf://ORG/REPO/FILE[@REVISION]")
    return HfSource(repo="/".join(parts[:2]), filename="/".join(parts[2:]), revision=revision)


def _is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
