"""What the roles of one run share: the spec, where things live, host facts, and what earlier roles decided."""
from __future__ import annotations

import os
import pwd
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ds4_converge.core.layout import Layout
from ds4_converge.core.state import Deployment, State, StateUnreadable
from ds4_converge.engine.release import BuildRequest, Release, Toolkit
from ds4_converge.spec.hostpaths import UnknownVariable, expand
from ds4_converge.spec.loader import LoadedSpec, SpecInvalid
from ds4_converge.spec.values import check_root
from ds4_converge.spec.model import Spec

if TYPE_CHECKING:
    from ds4_converge.engine.git import EngineRepo
    from ds4_converge.engine.pins import PinCache
    from ds4_converge.engine.server_args import ModelPaths
    from ds4_converge.facts import HostFacts
    from ds4_converge.models.digests import DigestCache
    from ds4_converge.service.render import RenderCache
    from ds4_converge.service.supervisor import Supervisor


@dataclass
class Context:
    loaded: LoadedSpec
    layout: Layout
    facts: HostFacts | None = None  # gathered once per run by the reconciler, before the first role
    check: bool = False  # plan only: nothing on the host may change
    before_change: Callable[[], object] = lambda: None  # called before a role applies anything (takes a deferred lock)
    say: Callable[[str], object] = print  # progress lines for people (silent in --json mode)
    on_role_start: Callable[[str], object] = lambda name: None  # the reconciler reports each role as it starts …
    on_role_done: Callable[[object], object] = lambda result: None  # … and its RoleResult as soon as it is known
    progress: bool = False  # draw progress bars (a TTY, not --json)
    # decided by the roles, in order
    toolkit: Toolkit = field(default_factory=Toolkit)
    service_env: dict[str, str] = field(default_factory=dict)
    build: BuildRequest | None = None
    engine_repo: EngineRepo | None = None
    release: Release | None = None
    models: ModelPaths | None = None
    memory_short: str | None = None  # the memory budget does not fit and model.memory_budget is warn: why
    desired: Deployment | None = None
    restart_needed: bool = False
    prepared: bool = False  # engine.prepare ran in this run
    switched: bool = False  # the old engine was stopped: a failure from here on needs a revert
    start: object | None = None  # service.start_log.StartMark of the engine started last by this run
    drained: object | None = None  # service.drain.Drained: what the last stop waited for
    state: State = field(default_factory=State)

    @property
    def spec(self) -> Spec:
        return self.loaded.spec

    @cached_property
    def supervisor(self) -> Supervisor:
        from ds4_converge.service.supervisor import Supervisor

        return Supervisor(self.layout)

    @cached_property
    def digests(self) -> DigestCache:
        """Verified sha256 digests by file identity. Planning may learn digests; they are written only by
        :meth:`remember_learned`, after the plans, outside --check."""
        from ds4_converge.models.digests import DigestCache

        return DigestCache(self.layout.cache / "digests.json", deferred=True)

    @cached_property
    def pins(self) -> PinCache:
        """Which commit each engine tag resolved to here: a no-op run needs no git for a tag it knows."""
        from ds4_converge.engine.pins import PinCache

        return PinCache(self.layout.cache / "pins.json")

    @cached_property
    def renders(self) -> RenderCache:
        """The config texts rendered last time, by what they were rendered from: a no-op needs no jinja2."""
        from ds4_converge.service.render import RenderCache

        return RenderCache(self.layout.cache / "rendered.json")

    def remember_learned(self) -> None:
        """Write what planning learned (digests, tag commits, rendered texts): caches, never a change of what
        serves. Only
        outside --check, and only into a root that exists (a run refused before any change leaves no trace)."""
        if self.check or not self.layout.root.exists():
            return
        for cache in ("digests", "pins", "renders"):
            if cache in self.__dict__:  # opened during this run
                self.__dict__[cache].flush()

    def host_path(self, raw: str) -> Path:
        """Expand a spec path on this host for the service user (never the caller's own HOME)."""
        return _host_path(self.loaded, raw)

    @property
    def endpoint(self) -> str:
        return f"http://{self.spec.server.host}:{self.spec.server.port}"


def service_account(loaded: LoadedSpec) -> tuple[str, str]:
    """(name, HOME) of the user the engine runs as; an unknown server.user is a spec error on this host."""
    try:
        return _account(loaded.spec.server.user)
    except KeyError:
        raise SpecInvalid([loaded.locate("server.user", f"no user {loaded.spec.server.user!r} on this host")]) \
            from None


def _host_path(loaded: LoadedSpec, raw: str) -> Path:
    user, home = service_account(loaded)
    return expand(raw, home=home, user=user, env=os.environ, base_dir=loaded.base_dir)


@cache
def _account(user: str | None) -> tuple[str, str]:
    """(name, HOME) of the service user (default: who runs us), read once per process, not once per path."""
    name = user or pwd.getpwuid(os.getuid()).pw_name
    return name, pwd.getpwnam(name).pw_dir


def make_context(loaded: LoadedSpec, **kwargs) -> Context:
    """Raises SpecInvalid (FILE:LINE:COL) when the spec does not fit this host: an unknown server.user, or a
    paths.root that names a variable this host lacks or expands to something config files cannot hold."""
    service_account(loaded)
    try:
        root = _host_path(loaded, loaded.spec.paths.root)
        check_root(str(root), expanded=True)
    except (UnknownVariable, ValueError) as exc:
        raise SpecInvalid([loaded.locate("paths.root", f"{exc} (as expanded on this host)")]) from None
    layout = Layout(root)
    try:
        state = State.load(layout.state_file)
    except StateUnreadable as exc:
        from ds4_converge.core.recovery import rebuilt_state  # only for a damaged state.json

        state = rebuilt_state(layout, loaded.spec.server.name, str(exc))
    return Context(loaded=loaded, layout=layout, state=state, **kwargs)
