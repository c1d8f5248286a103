"""What under paths.root may be trusted: no link the tool did not make, no folder another user owns or can write.

The tool runs as root on a Spark and writes its lock, state, supervisord's files and the engine's logs under
paths.root; supervisord runs the engine from releases/. A link planted there (`converge.lock -> /etc/passwd`,
`logs -> /etc`) would make it write, append or run as root wherever the link points; a folder another user owns
or can write lets that user plant one. So before anything is written, every path the tool uses under the root is
looked at without following links, and the run is refused, naming the path and its owner, when one is a link or
a folder it cannot trust. The tool itself makes no link under the root, so none is ever expected there.
"""
from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

from ds4_converge.core.layout import Layout
from ds4_converge.errors import Ds4Error


class UntrustedRoot(Ds4Error):
    pass


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _trusted_uids() -> set[int]:
    return {0, os.geteuid()}


def _folder_problem(path: Path, st: os.stat_result) -> str | None:
    if st.st_uid not in _trusted_uids():
        return (f"{path} is owned by {_owner(st.st_uid)}, not by root or the user running ds4-converge "
                f"({_owner(os.geteuid())}): its owner could plant links there")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (f"{path} can be written by others (mode {stat.S_IMODE(st.st_mode):04o}, owner "
                f"{_owner(st.st_uid)}): chmod go-w {path}")
    return None


def _entry_problem(path: Path) -> str | None:
    """One path under the root, looked at without following it: a link, or a folder that is not trusted."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path} cannot be examined: {exc.strerror}"
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return (f"{path} is a symbolic link (to {target}, owner {_owner(st.st_uid)}): ds4-converge makes no link "
                f"under paths.root and follows none; remove it")
    return _folder_problem(path, st) if stat.S_ISDIR(st.st_mode) else None


def _children(folder: Path) -> list[Path]:
    try:
        return sorted(folder.iterdir())
    except OSError:
        return []


def read_only(layout: Layout) -> str | None:
    """The root (or, before it exists, the folder it will be made in) is on a read-only file system: said as such,
    not as a lack of free space."""
    path = layout.root
    while not os.path.exists(path) and path != path.parent:
        path = path.parent
    try:
        readonly = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return None
    return (f"{path} is on a read-only file system: ds4-converge writes its releases, state and logs under "
            f"paths.root ({layout.root})") if readonly else None


def tree_problems(tree: Path, shown: int = 5) -> list[str]:
    """A built release, before anything starts from it: every entry owned by root or this user, no set-id file,
    nothing group or others may write (a Makefile run as root can `chmod 0777 .`). Links are looked at, never
    followed: a link's own mode means nothing."""
    found = []
    for top, dirs, files in os.walk(tree):
        for path in [Path(top)] * (top == str(tree)) + [Path(top, name) for name in dirs + files]:
            try:
                st = os.lstat(path)
            except OSError as exc:
                found.append(f"{path} cannot be examined: {exc.strerror}")
                continue
            if stat.S_ISLNK(st.st_mode):
                continue
            if st.st_uid not in _trusted_uids():
                found.append(f"{path} is owned by {_owner(st.st_uid)}, not by root or the user running "
                             f"ds4-converge")
            elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                found.append(f"{path} can be written by others (mode {stat.S_IMODE(st.st_mode):04o})")
            elif not stat.S_ISDIR(st.st_mode) and st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                # a folder's set-group-id only passes its group on (inherited from a parent folder)
                found.append(f"{path} runs with its owner's or group's rights (mode {stat.S_IMODE(st.st_mode):04o})")
    return found[:shown] + ([f"… and {len(found) - shown} more"] if len(found) > shown else [])


def problems(layout: Layout, *, releases: bool = True) -> list[str]:
    """Every reason not to write under this root; nothing when the root does not exist yet (it is made 0755).
    `releases=False` (for `stop`, which neither reads nor runs anything in a release) leaves out what is inside
    releases/: an untrustworthy release must never keep a stop from stopping what runs."""
    root = layout.root
    if read_only(layout):
        return [read_only(layout)]
    try:
        st = os.stat(root)  # the root itself may be a link an administrator made: its target is what is judged
    except FileNotFoundError:
        return []
    except OSError as exc:
        return [f"{root} cannot be examined: {exc.strerror}"]
    if not stat.S_ISDIR(st.st_mode):
        return [f"{root} is not a folder"]
    found = [p for p in [_folder_problem(root, st)] if p]
    folders = (layout.releases, layout.cache, layout.logs, layout.models, layout.run, layout.supervisor,
               layout.program_dir, layout.locks, layout.bench_results.parent)
    files = (layout.lock_file,)  # a link at state.json is damaged state: set aside (the link itself), rebuilt
    for path in (*folders, *files):
        problem = _entry_problem(path)
        if problem:
            found.append(problem)
    for folder in folders:  # what the tool writes, reads or runs in each: its logs, program files, releases …
        if not os.path.islink(folder) and (releases or folder != layout.releases):
            found += [p for p in map(_entry_problem, _children(folder)) if p]
    return found


def check(layout: Layout, *, releases: bool = True) -> None:
    """Raise UntrustedRoot naming every problem, before anything under the root is written."""
    found = problems(layout, releases=releases)
    if found:
        raise UntrustedRoot("paths.root cannot be trusted, nothing was changed:\n  " + "\n  ".join(found))
