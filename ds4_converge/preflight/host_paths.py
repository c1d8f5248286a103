"""Preflight checks that read this host's file system for a spec path (the facts measure disks, not what a path is):
a folder the engine writes must be a folder its user can write, or one it can create."""
from __future__ import annotations

import os
from pathlib import Path

from ds4_converge.core.file_kind import owner_words, what_is, writable_by
from ds4_converge.core.plan import Finding


def writable_dir_findings(field: str, path: Path, user: str, uid: int, gids: set[int]) -> list[Finding]:
    """`path` is a directory `user` can write, or does not exist and `user` can create it (mkdir -p, as the engine
    does) in the nearest folder above it that exists."""
    what = what_is(path)
    if what == "a directory":
        st = os.stat(path)
        if writable_by(st, uid, gids):
            return []
        return [Finding("error", f"{field} {path}: the engine's user {user} cannot write this directory "
                                 f"({owner_words(st)})", fix=f"chown {user} {path}, or name another directory")]
    if not what.startswith("missing"):
        return [Finding("error", f"{field} {path} is {what}, not a directory: the engine cannot keep its files there "
                                 f"(it would only log it and serve without them)",
                        fix="name a directory, or a path that does not exist yet")]
    above = path.parent
    while what_is(above).startswith("missing") and above != above.parent:
        above = above.parent
    kind = what_is(above)
    if kind != "a directory":
        return [Finding("error", f"{field} {path} does not exist, and {above} above it is {kind}, not a "
                                 f"directory: it cannot be created", fix="name a path under a directory")]
    st = os.stat(above)
    if not writable_by(st, uid, gids):
        return [Finding("error", f"{field} {path} does not exist, and the engine's user {user} cannot create it in "
                                 f"{above} ({owner_words(st)})", fix=f"create it for {user}, or name another path")]
    return []


def service_identity(name: str | None, passwd) -> tuple[str, int, set[int]]:
    """(name, uid, groups) of the engine's user: the facts' passwd entry, this process when they have none."""
    if passwd is None:
        import pwd

        entry = pwd.getpwuid(os.getuid())
        name, uid, gid = entry.pw_name, entry.pw_uid, entry.pw_gid
    else:
        name, uid, gid = passwd.name, passwd.uid, passwd.gid
    try:
        groups = set(os.getgrouplist(name, gid))
    except OSError:
        groups = {gid}
    return name, uid, groups
