"""Users: the service user's passwd entry (its HOME) and the user the executor runs as."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ds4_converge.facts.base import Fact, FactParseError, FrozenModel

#: ``getent`` exits 2 when the key is not found: that is a value (``None``), not a failure.
GETENT_NOT_FOUND = 2


class PasswdEntry(FrozenModel):
    name: str
    uid: int
    gid: int
    gecos: str
    home: str
    shell: str


def parse_getent_passwd(stdout: str) -> PasswdEntry | None:
    """One ``name:x:uid:gid:gecos:home:shell`` line -> entry; empty output -> ``None``."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        return None
    if len(lines) != 1:
        raise FactParseError(f"expected one passwd line, got {len(lines)}")
    fields = lines[0].split(":")
    if len(fields) != 7 or not fields[0]:
        raise FactParseError(f"not a passwd line: {lines[0]!r}")
    name, _pw, uid, gid, gecos, home, shell = fields
    try:
        return PasswdEntry(name=name, uid=int(uid), gid=int(gid), gecos=gecos, home=home, shell=shell)
    except ValueError as exc:
        raise FactParseError(f"bad uid/gid in passwd line: {lines[0]!r}") from exc


def parse_id_user(stdout: str) -> str:
    """``id -un`` output -> user name."""
    tokens = stdout.split()
    if len(tokens) != 1:
        raise FactParseError(f"expected one user name, got {stdout!r}")
    return tokens[0]


@dataclass(frozen=True)
class Passwd(Fact[PasswdEntry | None]):
    """``getent passwd USER``; ``None`` when the user does not exist."""

    user: str
    ok_returncodes: ClassVar[frozenset[int] | None] = frozenset({0, GETENT_NOT_FOUND})

    def command(self) -> list[str]:
        return ["getent", "passwd", self.user]

    def parse(self, stdout: str) -> PasswdEntry | None:
        return parse_getent_passwd(stdout)


@dataclass(frozen=True)
class CurrentUser(Fact[str | None]):
    """Name of the user the executor runs as."""

    def command(self) -> list[str]:
        return ["id", "-un"]

    def parse(self, stdout: str) -> str:
        return parse_id_user(stdout)
