"""Free disk space at paths (``/`` and the model dirs).

A path that does not exist yet (a model dir about to be created) is measured at its
nearest existing parent: :class:`ExistingAncestors` finds those, :class:`DiskFree` runs
``df -PB1`` on them, :func:`assemble_disk` (pure) joins the two.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar, Mapping, Sequence

from ds4_converge.facts.base import Fact, FactParseError, FrozenModel

_ANCESTOR_SCRIPT = r"""
for p in "$@"; do
  q=$p
  while [ ! -e "$q" ]; do
    n=$(dirname -- "$q")
    [ "$n" = "$q" ] && break
    q=$n
  done
  printf '%s\t%s\n' "$p" "$q"
done
"""


class DfEntry(FrozenModel):
    filesystem: str
    total_bytes: int
    used_bytes: int
    available_bytes: int
    mount: str


class DiskSpace(FrozenModel):
    #: The path asked about.
    path: str
    #: Whether it exists; if not, the numbers are those of ``measured_at``.
    exists: bool
    #: Nearest existing path (``path`` itself when it exists).
    measured_at: str
    filesystem: str
    mount: str
    total_bytes: int
    available_bytes: int


def parse_ancestors(stdout: str) -> dict[str, str]:
    """``path<TAB>nearest existing path`` lines -> mapping."""
    out: dict[str, str] = {}
    for line in stdout.splitlines():
        if not line:
            continue
        fields = line.split("\t")
        if len(fields) != 2 or not fields[0] or not fields[1]:
            raise FactParseError(f"not a path<TAB>ancestor line: {line!r}")
        out[fields[0]] = fields[1]
    return out


# Filesystem names may contain spaces, so anchor on the numeric columns.
_DF_LINE = re.compile(r"^(?P<fs>.+?)\s+(?P<total>\d+)\s+(?P<used>\d+)\s+(?P<avail>\d+)\s+(?:\d+%|-)\s+(?P<mount>/.*)$")


def parse_df(stdout: str) -> list[DfEntry]:
    """``df -PB1`` output -> one entry per data line, in argument order."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise FactParseError("empty df output")
    if lines[0].split()[0] == "Filesystem":
        lines = lines[1:]
    entries = []
    for line in lines:
        m = _DF_LINE.match(line)
        if m is None:
            raise FactParseError(f"not a df -P line: {line!r}")
        entries.append(DfEntry(filesystem=m["fs"], total_bytes=int(m["total"]), used_bytes=int(m["used"]),
                               available_bytes=int(m["avail"]), mount=m["mount"]))
    return entries


@dataclass(frozen=True)
class ExistingAncestors(Fact[dict[str, str]]):
    paths: tuple[str, ...]

    def command(self) -> list[str]:
        return ["sh", "-c", _ANCESTOR_SCRIPT, "sh", *self.paths]

    def parse(self, stdout: str) -> dict[str, str]:
        result = parse_ancestors(stdout)
        if set(result) != set(self.paths):
            raise FactParseError("ancestor probe did not answer for every path")
        return result

    def default(self) -> dict[str, str]:
        return {}


@dataclass(frozen=True)
class DiskFree(Fact[list[DfEntry]]):
    """``df -PB1 PATH...``: paths must exist (see :class:`ExistingAncestors`)."""

    paths: tuple[str, ...]
    #: df exits 1 if one path fails but still prints the others; the count check catches it.
    ok_returncodes: ClassVar[frozenset[int] | None] = frozenset({0})

    def command(self) -> list[str]:
        return ["df", "-PB1", "--", *self.paths]

    def parse(self, stdout: str) -> list[DfEntry]:
        entries = parse_df(stdout)
        if len(entries) != len(self.paths):
            raise FactParseError(f"df printed {len(entries)} lines for {len(self.paths)} paths")
        return entries

    def default(self) -> list[DfEntry]:
        return []


def assemble_disk(paths: Sequence[str], ancestors: Mapping[str, str], measured: Sequence[str],
                  entries: Sequence[DfEntry]) -> dict[str, DiskSpace]:
    """Join requested paths -> ancestor -> df entry (``measured[i]`` gave ``entries[i]``)."""
    by_path = dict(zip(measured, entries))
    out: dict[str, DiskSpace] = {}
    for p in paths:
        at = ancestors.get(p)
        entry = by_path.get(at) if at else None
        if entry is None:
            continue
        out[p] = DiskSpace(path=p, exists=at == p, measured_at=at, filesystem=entry.filesystem,
                           mount=entry.mount, total_bytes=entry.total_bytes,
                           available_bytes=entry.available_bytes)
    return out
