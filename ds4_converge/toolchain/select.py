"""Which CUDA toolkit builds the engine, and what its binary needs at run time. Pure: facts in, decisions out.

The engine's Makefile never looks at PATH: it runs ``$(CUDA_HOME)/bin/nvcc`` with ``CUDA_HOME ?= /usr/local/cuda``,
and an exported ``NVCC``/``CUDA_HOME`` silently wins. So the toolkit is chosen here from toolkit directories
(``toolchain.cuda_home``, else the newest dir matching ``toolchain.search`` that satisfies ``min_version``) and
passed to make explicitly; whatever ``nvcc`` is first on PATH is never the choice.

+ select_toolkit(spec, facts): ``(Toolkit | None, findings)``; ``None`` with an error finding when no usable toolkit.
+ chosen_toolkit(toolkit, facts): the ``CudaToolkit`` fact behind a ``Toolkit``.
+ needs_compat(toolkit, facts): the driver is older than the toolkit (forward-compat libcuda needed).
+ compat_package(version): ``13.2`` -> ``cuda-compat-13-2``.
+ compat_env(toolkit, facts): ``{"LD_LIBRARY_PATH": <toolkit>/compat}`` when the binary needs the compat libcuda.
"""
from __future__ import annotations

import posixpath

from ds4_converge.facts import HostFacts, Version
from ds4_converge.facts.cuda import CudaToolkit
from ds4_converge.core.plan import Finding
from ds4_converge.core.toolkit import Toolkit
from ds4_converge.spec.model import Spec


def _norm(path: str) -> str:
    return posixpath.normpath(path) if path else path


def _names(tk: CudaToolkit) -> set[str]:
    """Every spelling of a toolkit dir the facts know (real dir, links to it)."""
    return {_norm(p) for p in (tk.path, tk.realpath, *tk.aliases)}


def find_toolkit(facts: HostFacts, path: str) -> CudaToolkit | None:
    """The toolkit fact for a directory, by any of its names (``/usr/local/cuda`` finds what it points at)."""
    wanted = _norm(path)
    return next((tk for tk in facts.cuda.toolkits if wanted in _names(tk)), None)


def _min_version(spec: Spec) -> Version | None:
    raw = spec.toolchain.min_version
    return Version.parse(raw) if raw else None


def _describe(tk: CudaToolkit) -> str:
    return f"{tk.path} (nvcc {tk.version})" if tk.version else f"{tk.path} (nvcc version unknown)"


def _found(facts: HostFacts) -> str:
    if not facts.cuda.toolkits:
        return "no toolkit directories were found"
    return "toolkits found: " + ", ".join(_describe(tk) for tk in facts.cuda.toolkits)


def _path_note(facts: HostFacts) -> str:
    first = facts.cuda.path_nvcc
    if first is None:
        return ""
    version = first.version or "version unknown"
    return (f"; the nvcc first on PATH ({first.path}, {version}) is not used: the engine's Makefile builds with "
            f"$(CUDA_HOME)/bin/nvcc, never PATH's")


def _as_toolkit(tk: CudaToolkit) -> Toolkit:
    return Toolkit(nvcc=tk.nvcc, cuda_home=tk.path, version=str(tk.version))


def select_toolkit(spec: Spec, facts: HostFacts, *, cuda_home: str | None = None
                   ) -> tuple[Toolkit | None, list[Finding]]:
    """The toolkit to build with. cpu target -> ``Toolkit()`` (no CUDA).

    + cuda_home: ``toolchain.cuda_home`` expanded on the host (default: the spec's value as written).
    """
    if spec.engine.target == "cpu":
        return Toolkit(), []
    minimum = _min_version(spec)
    home = cuda_home if cuda_home is not None else spec.toolchain.cuda_home
    if home:
        return _pinned(home, minimum, facts)
    usable = [tk for tk in facts.cuda.toolkits if tk.nvcc and tk.version is not None]
    good = [tk for tk in usable if minimum is None or tk.version >= minimum]
    if not good:
        need = f"CUDA toolkit >= {minimum}" if minimum else "CUDA toolkit with a working bin/nvcc"
        older = f" (newest is {_describe(max(usable, key=lambda t: t.version))})" if usable else ""
        globs = ", ".join(spec.toolchain.search)
        return None, [Finding(
            "error",
            f"engine.target {spec.engine.target} needs a {need}{older}; searched {globs}: {_found(facts)}"
            f"{_path_note(facts)}",
            fix=(f"install cuda-toolkit-{minimum.major}-{minimum.minor}" if minimum else "install a CUDA toolkit")
                + ", or set toolchain.cuda_home (or toolchain.search) to where it lives")]
    # newest version; among equals the newer build, then the shortest path (cuda-13.2 over cuda-13.2.1-rc)
    best = max(good, key=lambda t: (t.version, _build_key(facts, t), -len(t.path)))
    return _as_toolkit(best), []


def _build_key(facts: HostFacts, tk: CudaToolkit) -> tuple[int, ...]:
    nvcc = next((n for n in facts.cuda.nvccs if n.realpath == tk.nvcc_realpath), None)
    if nvcc is None or not nvcc.build:
        return ()
    try:
        return tuple(int(p) for p in nvcc.build.split("."))
    except ValueError:
        return ()


def _pinned(home: str, minimum: Version | None, facts: HostFacts) -> tuple[Toolkit | None, list[Finding]]:
    tk = find_toolkit(facts, home)
    if tk is None:
        return None, [Finding("error", f"toolchain.cuda_home {home} is not a CUDA toolkit directory on this host "
                                       f"({_found(facts)})",
                              fix="install the toolkit there, or point toolchain.cuda_home at one that exists")]
    if not tk.nvcc:
        return None, [Finding("error", f"toolchain.cuda_home {home} has no executable bin/nvcc",
                              fix="reinstall that toolkit, or point toolchain.cuda_home at a complete one")]
    if tk.version is None:
        return None, [Finding("error", f"toolchain.cuda_home {home}: `{tk.nvcc} --version` did not report a "
                                       f"release", fix=f"run `{tk.nvcc} --version` and repair that toolkit")]
    if minimum is not None and tk.version < minimum:
        return None, [Finding("error", f"toolchain.cuda_home {home} has nvcc {tk.version}, older than "
                                       f"toolchain.min_version {minimum}",
                              fix=f"install cuda-toolkit-{minimum.major}-{minimum.minor} and point "
                                  f"toolchain.cuda_home at it, or lower toolchain.min_version")]
    return _as_toolkit(tk), []


def chosen_toolkit(toolkit: Toolkit, facts: HostFacts) -> CudaToolkit | None:
    return find_toolkit(facts, toolkit.cuda_home) if toolkit.cuda_home else None


def compat_package(version: str | Version) -> str:
    """``13.2`` -> ``cuda-compat-13-2`` (NVIDIA's apt package of forward-compat libcuda)."""
    v = Version.parse(version) if isinstance(version, str) else version
    return f"cuda-compat-{v.major}-{v.minor}"


def needs_compat(toolkit: Toolkit, facts: HostFacts) -> bool:
    """A binary built with this toolkit needs a newer libcuda than the installed driver provides."""
    driver = facts.driver.cuda_version
    if not toolkit.nvcc or not toolkit.version or driver is None:
        return False
    return Version.parse(toolkit.version) > driver


def compat_dir(toolkit: Toolkit, facts: HostFacts) -> str | None:
    """``<toolkit>/compat`` if it exists and holds a libcuda."""
    tk = chosen_toolkit(toolkit, facts)
    if tk is None or not tk.compat_dir or not any(lib.startswith("libcuda.so") for lib in tk.compat_libs):
        return None
    return tk.compat_dir


def compat_env(toolkit: Toolkit, facts: HostFacts) -> dict[str, str]:
    """Environment the engine needs to load the forward-compat libcuda; ``{}`` when the driver is new enough."""
    if not needs_compat(toolkit, facts):
        return {}
    directory = compat_dir(toolkit, facts)
    return {"LD_LIBRARY_PATH": directory} if directory else {}
