"""What a path is, in words a person reads ("a FIFO", "a character device"), and whether a user may write a folder.

A special file named where a regular file or a folder belongs is reported as what it is, never as "missing": the
fix differs (remove the FIFO, not download again)."""
from __future__ import annotations

import os
import stat

KINDS = {stat.S_IFREG: "a regular file", stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO",
         stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket",
         stat.S_IFLNK: "a symbolic link"}


def kind_of(mode: int) -> str:
    return KINDS.get(stat.S_IFMT(mode), "a special file")


def what_is(path: str | os.PathLike) -> str:
    """"missing", or what is there (links followed): "a regular file", "a FIFO", "a dangling symbolic link" …"""
    try:
        return kind_of(os.stat(path).st_mode)
    except FileNotFoundError:
        return "a dangling symbolic link" if os.path.islink(path) else "missing"
    except NotADirectoryError:
        return "missing (a folder above it is not a directory)"
    except PermissionError:
        return "unreadable (permission denied on a folder above it)"
    except OSError as exc:
        return f"unreadable ({exc.strerror})"


def writable_by(st: os.stat_result, uid: int, gids: set[int]) -> bool:
    """May `uid` (with groups `gids`) create entries in the folder `st` describes? Mode bits, as the kernel reads
    them without ACLs; root may always."""
    if uid == 0:
        return True
    need = (stat.S_IWUSR | stat.S_IXUSR) if st.st_uid == uid else (
        (stat.S_IWGRP | stat.S_IXGRP) if st.st_gid in gids else (stat.S_IWOTH | stat.S_IXOTH))
    return st.st_mode & need == need


def searchable_by(st: os.stat_result, uid: int, gids: set[int]) -> bool:
    """May `uid` (with groups `gids`) enter the folder `st` describes (look up names in it)?"""
    if uid == 0:
        return True
    need = stat.S_IXUSR if st.st_uid == uid else stat.S_IXGRP if st.st_gid in gids else stat.S_IXOTH
    return bool(st.st_mode & need)


def owner_words(st: os.stat_result) -> str:
    """"owned by root, mode 755": who may change a path, for a message that says why it was refused."""
    import pwd

    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = f"uid {st.st_uid}"
    return f"owned by {owner}, mode {st.st_mode & 0o7777:o}"
