"""Where each model file of the spec lives on this host, and whether it is fetched there: pure, from the spec.

Shared by the models role (which fetches and verifies the files), the preflight role (which checks the disk
they need) and the facts the reconciler gathers (which directories to measure).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ds4_converge.spec.hostpaths import UnknownVariable
from ds4_converge.spec.model import Model, ModelFile
from ds4_converge.spec.sources import HfSource, LocalSource, parse_source

#: hf:// sources need huggingface_hub: the `download` extra (`make run` installs only what a run needs)
HUB_EXTRA = "pip install 'ds4-converge[download]' (in a checkout: .venv/bin/pip install -e '.[download]')"

#: The spec's model slots, in the order the engine's flags name them (-m, --mtp, --dspark).
SLOTS = ("main", "mtp", "dspark")

Expander = Callable[[str], Path]


@dataclass(frozen=True)
class Placement:
    """One spec model file: where the engine reads it and, when it is fetched or copied there, from where."""

    slot: str
    entry: ModelFile
    path: Path | None  # None: a path in the entry does not expand on this host (`problem` says why)
    fetch: bool  # it comes from a source into `path` (else it is used where it is)
    local_source: Path | None = None  # a local source file (used in place, or copied into dest)
    problem: str = ""


def is_local(entry: ModelFile) -> bool:
    return isinstance(parse_source(entry.source), LocalSource)


def dest_is_file(dest: str | None) -> bool:
    """`dest: /srv/gguf/model.gguf` names the file itself (what a user who writes it means); any other dest is the
    directory the file goes into (a trailing / keeps a folder named like a file a folder)."""
    return bool(dest) and dest.lower().endswith(".gguf")


def place(entry: ModelFile, expand: Expander, models_dir: Path) -> tuple[Path, bool]:
    """(where the engine reads it, whether it is fetched there): a local source without dest is used where it
    is; everything else lands at dest: that file, or in that directory (default ROOT/models) under its own name."""
    if is_local(entry) and entry.dest is None:
        return expand(entry.source), False
    if dest_is_file(entry.dest):
        return expand(entry.dest), True
    directory = expand(entry.dest) if entry.dest else models_dir
    return directory / parse_source(entry.source).name, True


def entries(model: Model) -> list[tuple[str, ModelFile]]:
    """(slot, entry) of every model file the spec names."""
    return [(slot, getattr(model, slot)) for slot in SLOTS if getattr(model, slot) is not None]


def placements(model: Model, expand: Expander, models_dir: Path) -> list[Placement]:
    out = []
    for slot, entry in entries(model):
        local = is_local(entry)
        try:
            path, fetch = place(entry, expand, models_dir)
            source = expand(entry.source) if local else None
        except UnknownVariable as exc:
            out.append(Placement(slot, entry, None, not (local and entry.dest is None), problem=str(exc)))
            continue
        out.append(Placement(slot, entry, path, fetch, source))
    return out


def missing_without_source(loaded, want: Placement) -> str:
    """A model file that is not there and cannot be fetched: its spec line, the path as read, and how to give a
    source (validate says the same as a note)."""
    return loaded.locate(
        f"model.{want.slot}", f"{want.path} does not exist{loaded.relative_to_spec(want.entry.source)}, and the spec "
        f"gives no source to download it from (fix: put the file there, or give one: model.{want.slot}: "
        f"{{source: hf://OWNER/REPO/FILE.gguf}} or an https:// URL, docs/spec.md)")


def missing_here(loaded) -> list[str]:
    """For `validate`: the spec's local model files that are not on this host and have no source, each said as
    the run would say it. Only plain paths are looked at (~ and $VARS are the service user's, read by a run)."""
    import os

    def expand(raw: str) -> Path:
        if raw.startswith("~") or "$" in raw:
            raise UnknownVariable(raw)
        return Path(os.path.normpath(loaded.base_dir / raw))

    return [missing_without_source(loaded, want) for want in placements(loaded.spec.model, expand, loaded.base_dir)
            if want.path is not None and not want.fetch and not want.path.exists()]


def hub_missing(loaded, want: Placement) -> str | None:
    """An hf:// source where huggingface_hub is not installed: said at plan time, before anything changes."""
    import importlib.util

    if not isinstance(parse_source(want.entry.source), HfSource) or importlib.util.find_spec("huggingface_hub"):
        return None
    return loaded.locate(f"model.{want.slot}", f"{want.entry.source} is an hf:// source, and huggingface_hub, "
                                               f"which downloads from the Hub, is not installed (fix: {HUB_EXTRA})")
