"""What the roles of one run share: the spec, where things live, host facts, and what earlier roles decided."""
from __future__ import annotations

import os
import pwd
from dataclasses import dataclass, field
from pathlib import Path

from ds4_converge.spec.hostpaths import expand
from ds4_converge.core.layout import Layout
from ds4_converge.engine.release import BuildRequest, Release, Toolkit
from ds4_converge.engine.server_args import ModelPaths
from ds4_converge.spec.model import Spec
from ds4_converge.spec.loader import LoadedSpec
from ds4_converge.core.state import Deployment, State
from ds4_converge.service.supervisor import Supervisor


@dataclass
class Context:
    loaded: LoadedSpec
    layout: Layout
    facts: object | None = None  # facts.HostFacts, gathered once per run
    check: bool = False  # plan only: nothing on the host may change
    before_change: callable = lambda: None  # called before a role applies anything (takes a deferred lock)
    say: callable = print  # progress lines for people (silent in --json mode)
    progress: bool = False  # draw progress bars (a TTY, not --json)
    # decided by the roles, in order
    toolkit: Toolkit = field(default_factory=Toolkit)
    service_env: dict[str, str] = field(default_factory=dict)
    build: BuildRequest | None = None
    engine_repo: object | None = None
    release: Release | None = None
    models: ModelPaths | None = None
    desired: Deployment | None = None
    restart_needed: bool = False
    switched: bool = False  # the old engine was stopped: a failure from here on needs a revert
    start: object | None = None  # service.start_log.StartMark of the engine started last by this run
    state: State = field(default_factory=State)

    @property
    def spec(self) -> Spec:
        return self.loaded.spec

    @property
    def supervisor(self) -> Supervisor:
        return Supervisor(self.layout)


    def host_path(self, raw: str) -> Path:
        """Expand a spec path on this host for the service user (never the caller's own HOME)."""
        return _host_path(self.loaded, raw)

    @property
    def endpoint(self) -> str:
        return f"http://{self.spec.server.host}:{self.spec.server.port}"


def _host_path(loaded: LoadedSpec, raw: str) -> Path:
    user = loaded.spec.server.user or pwd.getpwuid(os.getuid()).pw_name
    return expand(raw, home=pwd.getpwnam(user).pw_dir, user=user, env=os.environ, base_dir=loaded.base_dir)


def make_context(loaded: LoadedSpec, **kwargs) -> Context:
    """Raises hostpaths.UnknownVariable when paths.root names a variable this host does not have."""
    layout = Layout(_host_path(loaded, loaded.spec.paths.root))
    return Context(loaded=loaded, layout=layout, state=State.load(layout.state_file), **kwargs)
