"""What ds4-converge knows about the real ds4 engine, per version, written down in this repository.

ds4.yaml holds the base: every fact of upstream 8d57664, the version it was first read from. versions.yaml holds,
for each other known engine, what differs: upstream versions keyed by commit, and the Entrpi fork as a flavour of
its own. A version's knowledge is the base with its overrides merged in (see :func:`for_version`).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

import yaml

BASE = "8d57664"
FORK = "fork"


@cache
def _read(name: str) -> dict:
    # libyaml's parser when PyYAML has it: the pure-Python one costs every run a noticeable part of its time
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(files(__name__).joinpath(name).read_text(), Loader=loader)


def load() -> dict:
    """The base knowledge (upstream 8d57664): facts every known version shares, and those of 8d57664."""
    return _read("ds4.yaml")


def versions() -> dict:
    return _read("versions.yaml")


def known_versions() -> list[str]:
    """Upstream commits, oldest first, then the fork."""
    return [BASE, *versions()["upstream"], FORK]


@cache
def for_version(name: str) -> dict:
    """The knowledge of one engine version: the base with that version's overrides merged in."""
    if name == BASE:
        return load()
    entry = versions()["fork"] if name == FORK else versions()["upstream"].get(name)
    if entry is None:
        raise KeyError(f"unknown engine version {name!r}; known: {', '.join(known_versions())}")
    parent = for_version(entry.get("based_on", BASE))
    return merge(parent, entry.get("overrides") or {})


def merge(base: dict, overrides: dict) -> dict:
    """Mappings merge key by key; anything else (a list, a value) replaces; None removes the key."""
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


@dataclass(frozen=True)
class EngineVersion:
    """The known version whose rules a build is judged by, and why that one."""

    name: str
    why: str

    @property
    def knowledge(self) -> dict:
        return for_version(self.name)

    @property
    def is_fork(self) -> bool:
        return self.name == FORK


def engine_version(commit: str = "", ref: str = "", flags: frozenset[str] = frozenset(),
                   topics: tuple[str, ...] = ()) -> EngineVersion:
    """Which known version a build is: the fork by the flags only it documents, an upstream version by its
    commit (or a ref naming one), otherwise the newest known upstream version whose help layout it has."""
    marks = sorted(set(versions()["fork"]["identified_by"]) & set(flags))
    if marks:
        return EngineVersion(FORK, f"its --help lists {', '.join(marks)} (the Entrpi fork)")
    upstream = [BASE, *versions()["upstream"]]
    for name in upstream:
        if commit and commit.startswith(name):
            return EngineVersion(name, f"commit {commit[:12]} is upstream {name}")
    for name in upstream:
        if ref and ref == name:
            return EngineVersion(name, f"ref {ref} names upstream {name}")
    fitting = [name for name in upstream if bool(for_version(name)["flags"].get("help_topics")) == bool(topics)]
    name = fitting[-1] if fitting else upstream[-1]
    layout = "help topic pages" if topics else "a single help page"
    return EngineVersion(name, f"commit {commit[:12] or '?'} is not a known version: judged by the rules of "
                               f"upstream {name}, the newest known version with {layout}")


def versions_with_flag(flag: str) -> list[str]:
    """The known versions whose ds4-server takes `flag` (for messages: where a missing flag exists)."""
    return [name for name in known_versions() if flag in for_version(name)["flags"]["listed"]]
