"""CUDA toolkits and every ``nvcc`` a build could pick up.

The ds4 Makefile uses ``$CUDA_HOME/bin/nvcc`` (``CUDA_HOME ?= /usr/local/cuda``), never
``PATH``; a shell or an installer uses the first ``nvcc`` on ``PATH``. Both can be stale,
so this module reports all of them:

* :class:`CudaLayout` (``sh`` probe): each ``nvcc`` on ``PATH`` in order (with its
  realpath), each toolkit dir matching the globs (default ``/usr/local/cuda*``) with its
  ``bin/nvcc`` and ``compat/`` libraries, and where the ``/usr/local/cuda`` link points.
* :class:`NvccVersion`: ``nvcc --version`` -> :class:`NvccRelease` (``13.2``, ``13.2.51``).

:func:`assemble_cuda` (pure) joins both into :class:`CudaFacts`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from ds4_converge.facts.base import Fact, FactParseError, FrozenModel, Version

DEFAULT_CUDA_GLOBS: tuple[str, ...] = ("/usr/local/cuda*",)
DEFAULT_CUDA_LINK = "/usr/local/cuda"

# --------------------------------------------------------------------------------------
# nvcc --version


class NvccRelease(FrozenModel):
    version: Version
    #: Full build version after ``V``, e.g. ``13.2.51``; ``None`` if not printed.
    build: str | None = None


_NVCC_RE = re.compile(r"Cuda compilation tools, release (\d+)\.(\d+)(?:, V(\d+(?:\.\d+)*))?")


def parse_nvcc_version(stdout: str) -> NvccRelease:
    """``...Cuda compilation tools, release 13.2, V13.2.51...`` -> ``NvccRelease(13.2, "13.2.51")``."""
    m = _NVCC_RE.search(stdout)
    if m is None:
        raise FactParseError("no 'Cuda compilation tools, release X.Y' in nvcc --version output")
    return NvccRelease(version=Version(int(m.group(1)), int(m.group(2))), build=m.group(3))


@dataclass(frozen=True)
class NvccVersion(Fact[NvccRelease | None]):
    path: str

    def command(self) -> list[str]:
        return [self.path, "--version"]

    def parse(self, stdout: str) -> NvccRelease:
        return parse_nvcc_version(stdout)


# --------------------------------------------------------------------------------------
# layout probe

# Tab-separated records; $1 = the cuda link, then the globs. POSIX sh (dash, busybox).
_LAYOUT_SCRIPT = r"""
link=$1; shift
set -f; IFS=:
for d in $PATH; do
  [ -n "$d" ] || d=.
  if [ -f "$d/nvcc" ] && [ -x "$d/nvcc" ]; then
    printf 'path\t%s\t%s\n' "$d/nvcc" "$(readlink -f -- "$d/nvcc")"
  fi
done
set +f; IFS=
for g in "$@"; do
  for t in $g; do
    [ -d "$t" ] || continue
    if [ -L "$t" ]; then sl=1; else sl=0; fi
    n=; nr=
    if [ -f "$t/bin/nvcc" ] && [ -x "$t/bin/nvcc" ]; then n="$t/bin/nvcc"; nr=$(readlink -f -- "$n"); fi
    printf 'toolkit\t%s\t%s\t%s\t%s\t%s\n' "$t" "$(readlink -f -- "$t")" "$sl" "$n" "$nr"
    if [ -d "$t/compat" ]; then
      printf 'compat\t%s\t%s\n' "$t" "$t/compat"
      for f in "$t"/compat/libcuda.so*; do
        if [ -e "$f" ] || [ -L "$f" ]; then printf 'compatlib\t%s\t%s\n' "$t" "${f##*/}"; fi
      done
    fi
  done
done
if [ -e "$link" ]; then ex=1; else ex=0; fi
if [ -L "$link" ]; then
  printf 'link\t%s\t%s\t1\t%s\t%s\n' "$link" "$ex" "$(readlink -- "$link")" "$(readlink -f -- "$link")"
elif [ "$ex" = 1 ]; then
  printf 'link\t%s\t1\t0\t\t%s\n' "$link" "$(readlink -f -- "$link")"
else
  printf 'link\t%s\t0\t0\t\t\n' "$link"
fi
"""


class PathNvcc(FrozenModel):
    path: str
    realpath: str


class CudaToolkit(FrozenModel):
    """A directory matching the toolkit globs (e.g. ``/usr/local/cuda-13.2``)."""

    path: str
    realpath: str
    #: Other glob matches resolving to the same directory (``/usr/local/cuda``, ``cuda-13``).
    aliases: list[str] = []
    nvcc: str | None = None
    nvcc_realpath: str | None = None
    #: Filled by :func:`assemble_cuda` from running that nvcc.
    version: Version | None = None
    #: ``<toolkit>/compat`` if it exists (forward-compat libcuda for an older driver).
    compat_dir: str | None = None
    compat_libs: list[str] = []
    #: Driver version of the compat libcuda (``libcuda.so.580.95.05`` -> ``580.95.05``).
    compat_driver: str | None = None


class CudaLink(FrozenModel):
    """The ``/usr/local/cuda`` path the Makefile's default ``CUDA_HOME`` uses."""

    path: str
    exists: bool
    is_symlink: bool
    #: Raw link text (``readlink``), e.g. ``cuda-13.0`` or ``/etc/alternatives/cuda``.
    target: str | None = None
    #: Fully resolved path (``readlink -f``); set for a dangling link too.
    resolved: str | None = None


class CudaLayout(FrozenModel):
    path_nvccs: list[PathNvcc] = []
    toolkits: list[CudaToolkit] = []
    link: CudaLink | None = None


_COMPAT_DRIVER_RE = re.compile(r"libcuda\.so\.(\d+\.\d+(?:\.\d+)*)$")


def _flag(value: str, line: str) -> bool:
    if value not in ("0", "1"):
        raise FactParseError(f"bad flag in cuda layout line: {line!r}")
    return value == "1"


def parse_cuda_layout(stdout: str) -> CudaLayout:
    """Parse the layout probe's tab-separated records (pure)."""
    path_nvccs: list[PathNvcc] = []
    raw_toolkits: dict[str, dict] = {}
    link: CudaLink | None = None
    for line in stdout.splitlines():
        if not line.strip():
            continue
        tag, *f = line.split("\t")
        if tag == "path" and len(f) == 2 and f[0]:
            path_nvccs.append(PathNvcc(path=f[0], realpath=f[1] or f[0]))
        elif tag == "toolkit" and len(f) == 5 and f[0]:
            raw_toolkits[f[0]] = dict(path=f[0], realpath=f[1] or f[0], is_link=_flag(f[2], line),
                                      nvcc=f[3] or None, nvcc_realpath=f[4] or f[3] or None,
                                      compat_dir=None, compat_libs=[])
        elif tag == "compat" and len(f) == 2 and f[0] in raw_toolkits:
            raw_toolkits[f[0]]["compat_dir"] = f[1]
        elif tag == "compatlib" and len(f) == 2 and f[0] in raw_toolkits:
            raw_toolkits[f[0]]["compat_libs"].append(f[1])
        elif tag == "link" and len(f) == 5 and f[0]:
            link = CudaLink(path=f[0], exists=_flag(f[1], line), is_symlink=_flag(f[2], line),
                            target=f[3] or None, resolved=f[4] or None)
        else:
            raise FactParseError(f"unexpected cuda layout line: {line!r}")
    return CudaLayout(path_nvccs=path_nvccs, toolkits=_merge_toolkits(raw_toolkits.values()), link=link)


def _merge_toolkits(raw) -> list[CudaToolkit]:
    """One entry per real directory; a real dir wins over symlinks to it as ``path``."""
    groups: dict[str, list[dict]] = {}
    for t in raw:
        groups.setdefault(t["realpath"], []).append(t)
    out = []
    for realpath, members in groups.items():
        members.sort(key=lambda t: (t["is_link"], t["path"]))
        main = members[0]
        libs = sorted(main["compat_libs"])
        drivers = [m.group(1) for m in map(_COMPAT_DRIVER_RE.search, libs) if m]
        out.append(CudaToolkit(
            path=main["path"], realpath=realpath, aliases=[m["path"] for m in members[1:]],
            nvcc=main["nvcc"], nvcc_realpath=main["nvcc_realpath"],
            compat_dir=main["compat_dir"], compat_libs=libs,
            compat_driver=max(drivers, key=_numeric_key) if drivers else None,
        ))
    return out


def _numeric_key(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


@dataclass(frozen=True)
class CudaLayoutProbe(Fact[CudaLayout]):
    """Lists nvcc on PATH, toolkit dirs matching ``globs`` and the ``link`` target."""

    globs: tuple[str, ...] = DEFAULT_CUDA_GLOBS
    link: str = DEFAULT_CUDA_LINK

    def command(self) -> list[str]:
        return ["sh", "-c", _LAYOUT_SCRIPT, "sh", self.link, *self.globs]

    def parse(self, stdout: str) -> CudaLayout:
        return parse_cuda_layout(stdout)

    def default(self) -> CudaLayout:
        return CudaLayout()


# --------------------------------------------------------------------------------------
# assembled view


class Nvcc(FrozenModel):
    """One distinct nvcc binary (deduplicated by realpath)."""

    path: str
    realpath: str
    #: Other paths to the same file (e.g. ``/usr/local/cuda/bin/nvcc``).
    aliases: list[str] = []
    #: Position among the nvccs found on PATH (0: what a bare ``nvcc`` runs); ``None``:
    #: not on PATH, only found in a toolkit dir.
    path_index: int | None = None
    #: Toolkit dir it belongs to (``CudaToolkit.path``), if any.
    toolkit: str | None = None
    version: Version | None = None
    build: str | None = None


class CudaFacts(FrozenModel):
    #: PATH nvccs first, in PATH order, then toolkit nvccs not on PATH.
    nvccs: list[Nvcc] = []
    toolkits: list[CudaToolkit] = []
    link: CudaLink | None = None

    @property
    def path_nvcc(self) -> Nvcc | None:
        """What a bare ``nvcc`` runs."""
        return next((n for n in self.nvccs if n.path_index == 0), None)

    @property
    def link_toolkit(self) -> CudaToolkit | None:
        """The toolkit ``/usr/local/cuda`` resolves to (what the Makefile uses by default)."""
        if self.link is None or not self.link.exists:
            return None
        return next((t for t in self.toolkits if t.realpath == self.link.resolved), None)

    @property
    def link_nvcc(self) -> Nvcc | None:
        tk = self.link_toolkit
        if tk is None or tk.nvcc_realpath is None:
            return None
        return next((n for n in self.nvccs if n.realpath == tk.nvcc_realpath), None)


def nvcc_paths(layout: CudaLayout) -> list[str]:
    """Distinct nvcc binaries to run ``--version`` on, one path per realpath."""
    seen: dict[str, str] = {}
    for p in layout.path_nvccs:
        seen.setdefault(p.realpath, p.path)
    for t in layout.toolkits:
        if t.nvcc and t.nvcc_realpath:
            seen.setdefault(t.nvcc_realpath, t.nvcc)
    return list(seen.values())


def assemble_cuda(layout: CudaLayout, releases: Mapping[str, NvccRelease | None]) -> CudaFacts:
    """Join the layout with ``nvcc --version`` results keyed by nvcc path (pure)."""
    entries: dict[str, dict] = {}
    index = 0
    for p in layout.path_nvccs:
        e = entries.get(p.realpath)
        if e is None:
            entries[p.realpath] = dict(path=p.path, realpath=p.realpath, aliases=[], path_index=index,
                                       toolkit=None)
            index += 1
        elif p.path != e["path"] and p.path not in e["aliases"]:
            e["aliases"].append(p.path)
    toolkits = []
    for t in layout.toolkits:
        version = None
        if t.nvcc and t.nvcc_realpath:
            e = entries.setdefault(t.nvcc_realpath, dict(path=t.nvcc, realpath=t.nvcc_realpath, aliases=[],
                                                         path_index=None, toolkit=None))
            e["toolkit"] = e["toolkit"] or t.path
            for alias in [t.nvcc, *(f"{a}/bin/nvcc" for a in t.aliases)]:
                if alias != e["path"] and alias not in e["aliases"]:
                    e["aliases"].append(alias)
            rel = _release_for(e, releases)
            version = rel.version if rel else None
        toolkits.append(t.model_copy(update={"version": version}))
    nvccs = []
    for e in entries.values():
        rel = _release_for(e, releases)
        nvccs.append(Nvcc(**e, version=rel.version if rel else None, build=rel.build if rel else None))
    return CudaFacts(nvccs=nvccs, toolkits=toolkits, link=layout.link)


def _release_for(entry: Mapping, releases: Mapping[str, NvccRelease | None]) -> NvccRelease | None:
    for p in (entry["path"], *entry["aliases"]):
        if releases.get(p) is not None:
            return releases[p]
    return None
