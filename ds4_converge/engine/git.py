"""The engine's git repository: resolve a version to a commit (read-only) and export a commit's tree."""
from __future__ import annotations

import re
import tarfile
from pathlib import Path

from ds4_converge.core.shell import CommandFailed, run

SHA = re.compile(r"^[0-9a-f]{40}$")


class RepoError(Exception):
    pass


def parse_ls_remote(output: str, ref: str) -> str | None:
    """Pick the commit for `ref`: a peeled annotated tag first, then the tag, then the branch."""
    refs = {}
    for line in output.splitlines():
        sha, _, name = line.partition("\t")
        if SHA.match(sha):
            refs[name.strip()] = sha
    for name in (f"refs/tags/{ref}^{{}}", f"refs/tags/{ref}", f"refs/heads/{ref}", ref):
        if name in refs:
            return refs[name]
    return None


class EngineRepo:
    """A bare cache of the engine repository under ROOT/cache; releases are exported from it."""

    def __init__(self, url: str, cache: Path):
        self.url, self.cache = url, cache

    def resolve(self, ref: str) -> str:
        """Commit for ref without changing anything: ls-remote, or the cache when the remote is unreachable."""
        if SHA.match(ref):
            return ref
        try:
            found = parse_ls_remote(run(["git", "ls-remote", self.url, ref, f"{ref}^{{}}"], timeout=120), ref)
        except CommandFailed as exc:
            found = self._cached(ref)
            if found is None:
                raise RepoError(f"{self.url}: cannot list refs: {exc.tail.strip()[-300:]}") from None
        if found is None:
            raise RepoError(f"{self.url}: no tag or branch named {ref!r}")
        return found

    def _cached(self, ref: str) -> str | None:
        if not self.cache.exists():
            return None
        try:
            return run(["git", "-C", str(self.cache), "rev-parse", "--verify", "-q", f"{ref}^{{commit}}"]).strip()
        except CommandFailed:
            return None

    def has(self, commit: str) -> bool:
        try:
            run(["git", "-C", str(self.cache), "cat-file", "-e", f"{commit}^{{commit}}"])
            return True
        except (CommandFailed, FileNotFoundError, NotADirectoryError):
            return False

    def fetch(self, commit: str) -> None:
        """Bring `commit` into the cache (clone on first use); no-op when it is there."""
        if self.has(commit):
            return
        if not (self.cache / "HEAD").exists():
            self.cache.parent.mkdir(parents=True, exist_ok=True)
            run(["git", "init", "--quiet", "--bare", str(self.cache)])
        run(["git", "-C", str(self.cache), "fetch", "--quiet", "--force", "--tags", self.url,
             "+refs/heads/*:refs/heads/*"], timeout=1800)
        if not self.has(commit):
            run(["git", "-C", str(self.cache), "fetch", "--quiet", self.url, commit], timeout=1800)
        if not self.has(commit):
            raise RepoError(f"{self.url}: commit {commit} not found after fetching")

    def export(self, commit: str, dest: Path) -> None:
        """A clean tree of exactly this commit: no objects from another build can leak in."""
        dest.mkdir(parents=True)
        archive = dest.parent / f".{dest.name}.tar"
        try:
            run(["git", "-C", str(self.cache), "archive", "--format=tar", "-o", str(archive), commit])
            with tarfile.open(archive) as tar:
                tar.extractall(dest, filter="tar")
        finally:
            archive.unlink(missing_ok=True)
