"""What of the host a spec needs looked at (toolkit dirs, model and KV dirs, the port, the service user), and
the bytes its downloads will still write: pure, from the spec and the file sizes on disk.

The reconciler gathers the facts with :func:`fact_request` once per run, before the first role.
"""
from __future__ import annotations

from pathlib import Path

from ds4_converge.core.layout import Layout
from ds4_converge.models.placement import Expander, Placement
from ds4_converge.preflight import rules
from ds4_converge.spec.model import Spec


def fact_request(spec: Spec, expand: Expander, layout: Layout, files: list[Placement]) -> dict:
    """Keyword arguments of :func:`~ds4_converge.facts.gather_host_facts` for this spec. A path that does not
    expand is left out here; the preflight role reports it."""
    paths, _ = rules.expand_paths(spec, expand)
    globs = [str(paths[f"toolchain.search[{i}]"]) for i in range(len(spec.toolchain.search))
             if f"toolchain.search[{i}]" in paths]
    if "toolchain.cuda_home" in paths:
        globs.append(str(paths["toolchain.cuda_home"]))
    link = str(paths.get("toolchain.cuda_link", spec.toolchain.cuda_link))
    dirs = [str(f.path.parent) for f in files if f.path is not None]
    if "server.kv_disk_dir" in paths:
        dirs.append(str(paths["server.kv_disk_dir"]))
    return dict(port=spec.server.port, model_dirs=list(dict.fromkeys(dirs)), root=str(layout.root),
                service_user=spec.server.user, cuda_globs=globs, cuda_link=link)


def _size(path: Path | None) -> int | None:
    try:
        return path.stat().st_size if path is not None and path.is_file() else None
    except OSError:
        return None


def model_bytes_needed(files: list[Placement]) -> dict[str, int]:
    """Bytes still to be written per dir. Sizes known here are a local source's own size and
    ``model.X.size``; a remote file of unknown size needs what the models role learns from the remote."""
    needed: dict[str, int] = {}
    for f in files:
        if not f.fetch or f.path is None:
            continue
        size = _size(f.local_source) or f.entry.size
        have = _size(f.path) or 0
        if size is not None and have < size:
            key = str(f.path.parent)
            needed[key] = needed.get(key, 0) + size - have
    return needed
