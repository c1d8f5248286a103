"""Who builds the engine: never root. As distribution builders do, a run as root hands the release's partial tree
to an unprivileged user (the service user, else nobody) for make and for the first run of the built binary, then
takes the tree back, so a Makefile can write nothing but its own tree (not a sibling release, not state.json, not
a link under logs/). A run that is not root is unprivileged already and builds as itself. A root under a folder
the builder may not enter (a private temporary folder) is built as root, and the build says so."""
from __future__ import annotations

import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

from ds4_converge.core.file_kind import searchable_by

FALLBACK = "nobody"  # the unprivileged account every Linux has


@dataclass(frozen=True)
class Builder:
    name: str
    uid: int
    gid: int

    @property
    def ids(self) -> tuple[int, int]:
        return self.uid, self.gid


def builder_for(service_user: str | None) -> Builder | None:
    """The user a build runs as; None: this process (it is not root)."""
    if os.geteuid() != 0:
        return None
    for name in (service_user, FALLBACK):
        if not name:
            continue
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if entry.pw_uid != 0:
            return Builder(entry.pw_name, entry.pw_uid, entry.pw_gid)
    return Builder(FALLBACK, 65534, 65534)  # no nobody in passwd: its customary ids


def closed_to(builder: Builder, tree: Path) -> Path | None:
    """The first folder above `tree` the builder may not enter (build tools open their files by absolute path, so
    it must reach the tree, not only stand in it); None: it reaches it."""
    for folder in reversed(tree.parents):
        try:
            if not searchable_by(os.stat(folder), builder.uid, {builder.gid}):
                return folder
        except OSError:
            return folder
    return None


def _walk(tree: Path):
    yield str(tree)
    for top, dirs, files in os.walk(tree):  # links are not followed: they are chowned themselves
        for name in dirs + files:
            yield os.path.join(top, name)


def hand_over(tree: Path, builder: Builder) -> None:
    """The exported tree becomes the builder's: the one place it may write."""
    for path in _walk(tree):
        os.chown(path, builder.uid, builder.gid, follow_symlinks=False)


def take_back(tree: Path) -> None:
    """The built tree becomes root's again before anything trusts it: owner root, no set-id bit, nothing writable
    by group or others."""
    for path in _walk(tree):
        os.chown(path, 0, 0, follow_symlinks=False)
        mode = os.lstat(path).st_mode
        if not stat.S_ISLNK(mode):
            os.chmod(path, stat.S_IMODE(mode) & ~(stat.S_ISUID | stat.S_ISGID | 0o022))
