"""What planning learns and keeps between runs, the caches under ROOT/cache: a role owns each (models: digests,
engine: pins, service: renders); the Context holds them by what the roles ask of them, and writes what they
learned at the run's end (:meth:`ds4_converge.core.context.Context.remember_learned`). A cache never decides what
serves: lost, it is learned again."""
from __future__ import annotations

import os
from typing import Protocol


class Learned(Protocol):
    def flush(self) -> None:
        """Write what this run learned (nothing else)."""


class Digests(Learned, Protocol):
    """Verified sha256 digests by file identity (models.digests.DigestCache): a converged box does not rehash."""

    def lookup(self, path: str | os.PathLike) -> str | None: ...

    def remember(self, path: str | os.PathLike, sha256: str) -> None: ...


class Pins(Learned, Protocol):
    """Which commit each engine tag resolved to (engine.pins.PinCache): a no-op needs no git."""

    def commit(self, repo: str, ref: str) -> str | None: ...

    def learn(self, repo: str, tag: str, commit: str) -> None: ...


class Renders(Learned, Protocol):
    """Config texts rendered last time (service.render.RenderCache): a no-op needs no jinja2."""

    def render(self, template: str, values: dict) -> str: ...
