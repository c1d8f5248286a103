"""Which commit an engine tag resolved to on this root, so that a converged box answers without git.

A no-op run must still notice a changed pin: the spec's `engine.ref`, or the `DS4_REF`/`DS4_REPO` defaults of
the installer, are read on every run, and a pin this root has not resolved before goes to git. What is not
asked again is what a known tag points at: tags are treated as fixed, as `git fetch` treats them (it never
moves an existing tag without --force). A branch moves, so a branch is resolved on every run. To move to a
re-pointed tag, pin its commit (`engine.commit`) or use a new tag. The file is a cache: unreadable means empty.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from ds4_converge.core.layout import write_atomic
from ds4_converge.core import bounded_file

_FORMAT_VERSION = 1


def key(repo: str, ref: str) -> str:
    return f"{repo}#{ref}"


class PinCache:
    """JSON file {"version": 1, "tags": {"REPO#TAG": COMMIT}}; learned in memory, written by :meth:`flush`."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._tags: dict[str, str] | None = None
        self._dirty = False

    def commit(self, repo: str, ref: str) -> str | None:
        return self._load().get(key(repo, ref))

    def learn(self, repo: str, tag: str, commit: str) -> None:
        tags = self._load()
        if tags.get(key(repo, tag)) != commit:
            tags[key(repo, tag)] = commit
            self._dirty = True

    def flush(self) -> None:
        if self._dirty:
            write_atomic(self.path, json.dumps({"version": _FORMAT_VERSION, "tags": self._load()}, indent=1,
                                               sort_keys=True) + "\n")
            self._dirty = False

    def _load(self) -> dict[str, str]:
        if self._tags is None:
            try:
                data = bounded_file.read_json(self.path)
                tags = data["tags"] if data.get("version") == _FORMAT_VERSION else {}
                self._tags = {k: v for k, v in tags.items() if isinstance(k, str) and isinstance(v, str)}
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                self._tags = {}
        return self._tags
