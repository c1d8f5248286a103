"""What the roles of one run share: the spec, where things live, host facts, and what earlier roles decided.

Plain data of the ground: every field's type is of the ground or below it. A value the roles share (a release,
the model paths, the memory budget) is a type of core; a role's handle (the supervisord client, a cache) is named
by a small Protocol in core that says what the roles ask of it, and the role that makes it owns the class. The
orchestration makes the context (:func:`ds4_converge.orchestrate.context.make_context`) and hands it the
roles' handles and the run's policy (what it may change, which facts it plans from, when it takes the lock).
"""
from __future__ import annotations

import os
import pwd
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ds4_converge.core.layout import Layout
from ds4_converge.core.state import Deployment, State
from ds4_converge.core.toolkit import Toolkit
from ds4_converge.spec.hostpaths import VARIABLE, UnknownVariable, expand
from ds4_converge.spec.loader import LoadedSpec, SpecInvalid
from ds4_converge.spec.model import Spec
from ds4_converge.spec.values import check_root

if TYPE_CHECKING:  # names for the fields' types; a run loads none of them for the Context's sake
    from ds4_converge.core.learned import Digests, Pins, Renders
    from ds4_converge.core.memory_fit import MemoryFit
    from ds4_converge.core.model_paths import ModelPaths
    from ds4_converge.core.release import BuildRequest, Release
    from ds4_converge.core.role_result import RoleResult
    from ds4_converge.core.supervision import Supervision
    from ds4_converge.facts import HostFacts


@dataclass
class Context:
    loaded: LoadedSpec
    layout: Layout
    facts: HostFacts | None = None  # gathered once per run by the reconciler, before the first role
    # the service user's (name, HOME) as the target host has them, from facts captured there (--check --facts);
    # None: looked up on this host
    account: tuple[str, str] | None = None
    facts_elsewhere: bool = False  # facts captured on another host (--check --facts): this host's files are not its
    check: bool = False  # plan only: nothing on the host may change
    before_change: Callable[[], object] = lambda: None  # called before a role applies anything (takes a deferred lock)
    say: Callable[[str], object] = print  # progress lines for people (silent in --json mode)
    on_role_start: Callable[[str], object] = lambda name: None  # the reconciler reports each role as it starts …
    on_role_done: Callable[[RoleResult], object] = lambda result: None  # … and its RoleResult as soon as it is known
    progress: bool = False  # draw progress bars (a TTY, not --json)
    # decided by the roles, in order
    toolkit: Toolkit = field(default_factory=Toolkit)
    service_env: dict[str, str] = field(default_factory=dict)
    build: BuildRequest | None = None
    release: Release | None = None
    models: ModelPaths | None = None
    memory: MemoryFit | None = None  # the models role's memory budget: the estimate, its room, why it fell short
    desired: Deployment | None = None
    restart_needed: bool = False
    prepared: bool = False  # engine.prepare ran in this run
    state: State = field(default_factory=State)
    command: str = "converge"  # the CLI command of this run (converge, rollback, tune …): a switch records it
    # the roles' handles, made by the orchestration; they read or write nothing until first used
    supervisor: Supervision | None = None  # of this root
    digests: Digests | None = None  # verified sha256 digests by file identity, learned by planning
    pins: Pins | None = None  # which commit each engine tag resolved to (a no-op needs no git)
    renders: Renders | None = None  # config texts rendered last time (a no-op needs no jinja2)

    @property
    def spec(self) -> Spec:
        return self.loaded.spec

    def remember_learned(self) -> None:
        """Write what planning learned (digests, tag commits, rendered texts): caches, never a change of what
        serves. Only
        outside --check, and only into a root that exists (a run refused before any change leaves no trace)."""
        if self.check or not self.layout.root.exists():
            return
        for learned in (self.digests, self.pins, self.renders):
            if learned is not None:
                try:
                    learned.flush()  # writes only what this run learned
                except OSError:
                    # a cache that cannot be written (a full disk) is learned again by the next run; what this
                    # run did, and its outcome, stand
                    continue

    def host_path(self, raw: str) -> Path:
        """Expand a spec path on this host for the service user (never the caller's own HOME)."""
        return _host_path(self.loaded, raw, self.account)


def service_account(loaded: LoadedSpec) -> tuple[str, str]:
    """(name, HOME) of the user the engine runs as; an unknown server.user is a spec error on this host."""
    try:
        return _account(loaded.spec.server.user)
    except KeyError:
        raise SpecInvalid([loaded.locate("server.user", f"no user {loaded.spec.server.user!r} on this host")]) \
            from None


def _host_path(loaded: LoadedSpec, raw: str, account: tuple[str, str] | None = None) -> Path:
    user, home = account or service_account(loaded)
    return expand(raw, home=home, user=user, env=os.environ, base_dir=loaded.base_dir)


def _path_without_account(loaded: LoadedSpec, raw: str) -> Path:
    """A spec path expanded for a server.user that does not exist (any more): possible unless it names the home."""
    user = loaded.spec.server.user
    if raw.startswith("~") or any((m.group("braced") or m.group("plain")) in ("HOME", "USER")
                                  for m in VARIABLE.finditer(raw)):
        raise SpecInvalid([loaded.locate("paths.root", f"{raw}: names the home of server.user {user!r}, who does "
                                                       f"not exist on this host (any more): there is no telling "
                                                       f"where it is; give paths.root as it expands there")])
    return expand(raw, home="", user=user or "", env=os.environ, base_dir=loaded.base_dir)


@cache
def _account(user: str | None) -> tuple[str, str]:
    """(name, HOME) of the service user (default: who runs us), read once per process, not once per path."""
    name = user or pwd.getpwuid(os.getuid()).pw_name
    return name, pwd.getpwnam(name).pw_dir


def root_layout(loaded: LoadedSpec, *, user_may_be_gone: bool = False,
                account: tuple[str, str] | None = None) -> Layout:
    """Where this spec's root lies on this host. Raises SpecInvalid (FILE:LINE:COL) when the spec does not fit
    this host: an unknown server.user, or a paths.root that names a variable this host lacks or expands to
    something config files cannot hold.

    user_may_be_gone: for what must work after the service user was deleted (`stop`): the root is found
    without the account unless paths.root names that user's home. account: the service user's (name, HOME) as
    another host has them (facts captured there), not looked up here."""
    try:
        if account is None:
            service_account(loaded)
        expand_root = partial(_host_path, loaded, account=account)
    except SpecInvalid:
        if not user_may_be_gone:
            raise
        expand_root = partial(_path_without_account, loaded)
    try:
        root = expand_root(loaded.spec.paths.root)
        check_root(str(root), expanded=True)
    except (UnknownVariable, ValueError) as exc:
        raise SpecInvalid([loaded.locate("paths.root", f"{exc} (as expanded on this host)")]) from None
    return Layout(root)
