"""The engine's git repository: resolve a version to a commit (read-only) and export a commit's tree.

The URL and ref come from the spec or from an installer: git never reads them as options (they follow `--`, and
the spec refuses values that begin with '-'), and git may use only the transports we mean (GIT_ALLOW_PROTOCOL).
"""
from __future__ import annotations

import re
from pathlib import Path

from ds4_converge.core.shell import CommandFailed, run
from ds4_converge.errors import Ds4Error
from ds4_converge.spec.values import GIT_PROTOCOLS

SHA = re.compile(r"^[0-9a-f]{40}$")
FETCH_TIMEOUT_S = 1800
# git's own allow-list (it overrides protocol.allow): no ext::, fd::, http:// or git://, in submodules neither;
# no credential prompt that would hang a run under Ansible or systemd
GIT_ENV = {"GIT_ALLOW_PROTOCOL": ":".join(GIT_PROTOCOLS), "GIT_TERMINAL_PROMPT": "0"}


def git(*args: str, timeout: float | None = 120) -> str:
    return run(["git", *args], env=GIT_ENV, timeout=timeout)


class RepoError(Ds4Error):
    pass


def parse_ls_remote(output: str, ref: str) -> str | None:
    """Pick the commit for `ref`: a peeled annotated tag first, then the tag, then the branch."""
    found = parse_ls_remote_kind(output, ref)
    return found[0] if found else None


def parse_ls_remote_kind(output: str, ref: str) -> tuple[str, str] | None:
    """(commit, "tag" | "branch" | "other") for `ref`, with the same precedence as parse_ls_remote."""
    refs = {}
    for line in output.splitlines():
        sha, _, name = line.partition("\t")
        if SHA.match(sha):
            refs[name.strip()] = sha
    for name, kind in ((f"refs/tags/{ref}^{{}}", "tag"), (f"refs/tags/{ref}", "tag"), (f"refs/heads/{ref}", "branch"),
                       (ref, "other")):
        if name in refs:
            return refs[name], kind
    return None


class EngineRepo:
    """A bare cache of the engine repository under ROOT/cache; releases are exported from it."""

    def __init__(self, url: str, cache: Path):
        self.url, self.cache = url, cache

    def resolve(self, ref: str) -> str:
        """Commit for ref without changing anything: ls-remote, or the cache when the remote is unreachable."""
        return self.resolve_kind(ref)[0]

    def resolve_kind(self, ref: str) -> tuple[str, str]:
        """(commit, what ref named: "commit", "tag", "branch", "other", or "cached" when the remote was
        unreachable and the local cache answered)."""
        if SHA.match(ref):
            return ref, "commit"
        try:
            found = parse_ls_remote_kind(git("ls-remote", "--", self.url, ref, f"{ref}^{{}}"), ref)
        except CommandFailed as exc:
            cached = self._cached(ref)
            if cached is None:
                raise RepoError(f"{self.url}: cannot list refs: {exc.tail.strip()[-300:]}") from None
            found = cached, "cached"
        if found is None:
            raise RepoError(f"{self.url}: no tag or branch named {ref!r}")
        return found

    def _cached(self, ref: str) -> str | None:
        if not self.cache.exists():
            return None
        try:
            return git("-C", str(self.cache), "rev-parse", "--verify", "-q", "--end-of-options",
                       f"{ref}^{{commit}}").strip()
        except CommandFailed:
            return None

    def has(self, commit: str) -> bool:
        try:
            git("-C", str(self.cache), "cat-file", "-e", f"{commit}^{{commit}}")
            return True
        except CommandFailed:
            return False

    def fetch(self, commit: str) -> None:
        """Bring `commit` into the cache (clone on first use); no-op when it is there."""
        if self.has(commit):
            return
        if not (self.cache / "HEAD").exists():
            self.cache.parent.mkdir(parents=True, exist_ok=True)
            git("init", "--quiet", "--bare", "--", str(self.cache))
        git("-C", str(self.cache), "fetch", "--quiet", "--force", "--tags", "--", self.url,
            "+refs/heads/*:refs/heads/*", timeout=FETCH_TIMEOUT_S)
        if not self.has(commit):
            git("-C", str(self.cache), "fetch", "--quiet", "--", self.url, commit, timeout=FETCH_TIMEOUT_S)
        if not self.has(commit):
            raise RepoError(f"{self.url}: commit {commit} not found after fetching")

    def export(self, commit: str, dest: Path) -> None:
        """A clean tree of exactly this commit: no objects from another build can leak in."""
        import tarfile  # only when building

        dest.mkdir(parents=True)
        archive = dest.parent / f".{dest.name}.tar"
        try:
            # tar.umask: git writes 0664/0775 modes by default, which a root's extraction keeps where Python has
            # no "tar" filter (before 3.11.4) and a release must not have (core/root_trust.py)
            git("-C", str(self.cache), "-c", "tar.umask=0022", "archive", "--format=tar", "-o", str(archive), commit,
                timeout=600)
            with tarfile.open(archive) as tar:
                # the "tar" filter (no absolute paths, no links out of dest) exists from Python 3.11.4 on;
                # git archive of our own cache writes neither, so older 3.11s extract without it
                tar.extractall(dest, **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
        finally:
            archive.unlink(missing_ok=True)
