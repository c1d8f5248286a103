"""One reconciler per root: a flock on ROOT/converge.lock that holds our PID."""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ds4_converge.errors import Ds4Error


class LockHeld(Ds4Error):
    def __init__(self, path: Path, holder: str):
        super().__init__(f"another ds4-converge run holds {path} (pid {holder or 'unknown'})")
        self.path, self.holder = path, holder


def lock_holders(fd: int) -> str:
    """PIDs holding a flock on fd's file, from the kernel (/proc/locks), not from the file's text: the holder
    writes its PID only after it got the lock, so the text can be empty or an earlier holder's for a moment."""
    st = os.fstat(fd)
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = []
    try:
        with open("/proc/locks") as locks:
            for line in locks:
                fields = line.split()
                # "1: FLOCK  ADVISORY  WRITE 1234 08:02:5678 0 EOF"; blocked waiters are marked "->"
                if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == inode and fields[4].isdigit():
                    pids.append(fields[4])
    except OSError:
        return ""
    return ", ".join(dict.fromkeys(pids))


class RunLock:
    """`read_only` (check mode): a shared lock that creates and writes nothing; a writer still excludes it."""

    def __init__(self, path: Path, *, read_only: bool = False):
        self.path, self.read_only = path, read_only
        self._fd: int | None = None

    def __enter__(self) -> RunLock:
        return self

    def acquire(self) -> RunLock:
        """Take the lock (idempotent); raise LockHeld at once when another run has it."""
        if self._fd is not None:
            return self
        if self.read_only:
            if not self.path.exists():
                return self  # a box never converged: nothing to protect
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)  # never a link
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if self.read_only else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = lock_holders(fd) or os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            raise LockHeld(self.path, holder) from None
        if not self.read_only:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
