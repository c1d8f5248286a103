"""What serves under a root, read once: the one reader of it. `status`, the service plan, the no-op's receipt, a
failure's "serving now" and the watchdog all read a :class:`Snapshot` and judge from it, none asks supervisord,
the program files or the front door on its own.

A snapshot holds supervisord (up, down, or not to be asked, and why), each program of this root (the engine
server.name, its candidate server.name + ".next", the front door, the switch guard, the watchdog: state, PID,
uptime, and for an engine the release its program file names), where the front door sends clients, and
state.json's current and last good as the caller read them. :func:`read` is bounded (supervisord's settle, its
bounded XML-RPC, the front door's bounded admin socket, program files read as regular files of bounded size) and
never raises: a file that is missing is None, a supervisord that cannot be asked is `unknown` with its words.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Mapping

from ds4_converge.core import bounded_file
from ds4_converge.core.layout import Layout
from ds4_converge.core.state import Deployment
from ds4_converge.service import haproxy
from ds4_converge.service.render import read_program_conf
from ds4_converge.service.supervisor import GUARD, WATCHDOG

if TYPE_CHECKING:
    from ds4_converge.core.state import State
    from ds4_converge.service.supervisor import Supervisor
    from ds4_converge.spec.model import Spec

CANDIDATE_SUFFIX = ".next"  # server.name allows no '.': no spec names its engine so
FRONT = haproxy.PROGRAM  # the front door's supervisord program
SETTLE_S = 5.0  # a supervisord that is reloading is waited for this long, as a failure's report did
SERVING = ("RUNNING", "STARTING")
MAX_PROGRAM_BYTES = 1 << 20  # a program file holds one command line and a few model lines
HOLD = haproxy.HOLD  # the front door's server that holds requests


@dataclass(frozen=True)
class Program:
    """One supervisord program of this root as supervisord runs it now."""

    name: str
    state: str | None = None  # supervisord's statename; None: supervisord knows no such program (or is down)
    pid: int | None = None  # while it runs or starts
    uptime_s: int | None = None
    release: str | None = None  # an engine's: the release its program file names
    conf: str | None = field(default=None, repr=False)  # an engine's program file as on disk (secrets unsealed)
    info: Mapping | None = field(default=None, repr=False, compare=False)  # supervisord's getProcessInfo

    @property
    def runs(self) -> bool:
        """supervisord runs it, or is starting it (STARTING until its startsecs passed)."""
        return self.state in SERVING

    @property
    def serves(self) -> bool:
        """It runs, with a PID: what a client of this root reaches (an engine) or a reader may ask."""
        return self.runs and bool(self.pid)

    @property
    def log(self) -> str | None:
        """Where supervisord writes its output (an engine's log)."""
        return (self.info or {}).get("stdout_logfile") or None


@dataclass(frozen=True)
class Snapshot:
    """What serves under one root at one moment (see the module's words)."""

    name: str  # server.name
    root: Path | None = None  # paths.root
    supervisord: bool = False  # up and answering (False when down or `unknown`)
    unknown: str | None = None  # why supervisord could not be asked; None: it was asked, or nothing listens
    error: BaseException | None = field(default=None, repr=False, compare=False)  # what asking it raised
    programs: Mapping[str, Program] = field(default_factory=dict)
    front_servers: Mapping[str, Mapping] | None = None  # the front door's {"a": {"port", "up"}, …}; None: not read
    front_problem: str | None = None  # why the front door's servers could not be read
    leftovers: tuple[int, ...] = ()  # what a dead supervisord left running, unsupervised (read only when down)
    current: Deployment | None = None  # state.json's, as the caller read it
    last_good: Deployment | None = None

    def program(self, name: str) -> Program:
        return self.programs.get(name) or Program(name)

    @property
    def engine(self) -> Program:
        return self.program(self.name)

    @property
    def candidate(self) -> Program:
        return self.program(self.name + CANDIDATE_SUFFIX)

    @property
    def front(self) -> Program:
        return self.program(FRONT)

    @property
    def guard(self) -> Program:
        return self.program(GUARD)

    @property
    def watchdog(self) -> Program:
        return self.program(WATCHDOG)

    @property
    def points_at(self) -> int | None:
        """The port of the engine slot the front door sends clients to (None: no front door read, or none up)."""
        live = [found["port"] for server, found in (self.front_servers or {}).items()
                if found.get("up") and server != HOLD]
        return live[0] if live else None

    def slot_of(self, port: int | None) -> str | None:
        """The front door's server (slot) that sends clients to `port`, when there is one."""
        return next((server for server, found in (self.front_servers or {}).items()
                     if server != HOLD and found.get("port") == port), None) if port is not None else None

    def state_words(self) -> str:
        """supervisord's word for the engine: "unknown", "not running" (no supervisord, no program) or its state."""
        if self.unknown is not None:
            return "unknown"
        return self.engine.state or "not running"

    def release(self) -> str | None:
        """The release that serves: state.json's current, counted only while its engine runs or starts."""
        return self.current.release if self.engine.serves and self.current is not None else None

    def endpoint(self) -> str | None:
        return self.current.endpoint if self.engine.serves and self.current is not None else None

    def standing(self, last_run: Mapping | None = None) -> str:
        """What `status` says of this root before it asks the engine: "unknown" (supervisord cannot be asked),
        "never" (never converged here), "unsupervised" (supervisord is gone, what it started runs on), "stopped"
        (by `ds4-converge stop`: `last_run` says so), "down" (nothing serves), or "serves" (release() runs)."""
        if self.unknown is not None:
            return "unknown"
        if self.current is None and self.last_good is None and self.engine.pid is None:
            return "never"
        if self.release() is not None:
            return "serves"
        if self.leftovers:
            return "unsupervised"
        if last_run and last_run.get("command") == "stop" and last_run.get("ok"):
            return "stopped"
        return "down"

    def serving_words(self) -> str:
        """What runs under this root right now, in words, for a report after things went wrong."""
        if self.unknown is not None:
            return f"unknown (supervisord: {self.error if self.error is not None else self.unknown})"
        engine = self.engine
        if engine.state not in SERVING:
            return "nothing"
        state = "" if engine.state == "RUNNING" else f", {engine.state.lower()}"
        return f"{self.name} (pid {engine.pid}{state}) on release {engine.release or 'unknown'}"


def unknown(name: str, why: str, *, root: Path | None = None, state: State | None = None,
            error: BaseException | None = None) -> Snapshot:
    """A snapshot of a root whose supervisord is known not to answer (asked already: not waited on again)."""
    current, last_good = (state.current, state.last_good) if state is not None else (None, None)
    return Snapshot(name, root, unknown=why, error=error, current=current, last_good=last_good)


def read(layout: Layout, supervisor: Supervisor, spec: Spec, state: State | None, *,
         settle: float = SETTLE_S, front: bool = True) -> Snapshot:
    """What serves under `layout`'s root now, for `spec`'s engine; never raises, never hangs. `front`: False
    where the front door's slot is not wanted (its admin socket is not asked)."""
    return read_named(layout, supervisor, spec.server.name, state=state, front=front and spec.front is not None,
                      settle=settle)


def read_named(layout: Layout, supervisor: Supervisor, name: str, *, state: State | None = None,
               front: bool | None = None, settle: float = SETTLE_S) -> Snapshot:
    """:func:`read` for a reader that has no spec (the watchdog: the name its settings give). `front`: read the
    front door's servers (None: when its admin socket exists)."""
    try:
        up = supervisor.is_running(settle=settle)
        infos = supervisor.all_processes() if up else []
    except Exception as exc:  # noqa: BLE001 - half-up, unreadable socket, permission: "unknown" is the answer
        return unknown(name, str(exc) or type(exc).__name__, root=layout.root, state=state, error=exc)
    ours = {name, name + CANDIDATE_SUFFIX, FRONT, GUARD, WATCHDOG}
    programs = {info["name"]: _program(layout, info) for info in infos if info.get("name") in ours}
    servers, problem = _front(layout, name, front, programs.get(FRONT))
    current, last_good = (state.current, state.last_good) if state is not None else (None, None)
    return Snapshot(name, layout.root, up, programs=MappingProxyType(programs), front_servers=servers,
                    front_problem=problem, leftovers=() if up else _leftovers(supervisor), current=current,
                    last_good=last_good)


def _program(layout: Layout, info: Mapping) -> Program:
    name, state = info["name"], info.get("statename")
    runs = state in SERVING and bool(info.get("pid"))
    uptime = max(0, int(info["now"] - info["start"])) if runs and info.get("now") and info.get("start") else None
    conf = _program_text(layout, name) if name not in (FRONT, GUARD, WATCHDOG) else None
    release = read_program_conf(conf)[0] if conf is not None else None
    return Program(name, state, info.get("pid") if runs else None, uptime, release, conf, MappingProxyType(dict(info)))


def _program_text(layout: Layout, name: str) -> str | None:
    try:
        return bounded_file.read(layout.program_conf(name), MAX_PROGRAM_BYTES, "a program file").decode(
            "utf-8", "replace")
    except (OSError, ValueError):
        return None


def _front(layout: Layout, name: str, wanted: bool | None,
           program: Program | None) -> tuple[Mapping | None, str | None]:
    if wanted is False or (wanted is None and not haproxy.admin_socket(layout).exists()):
        return None, None
    try:
        return MappingProxyType(haproxy.servers(layout, name)), None
    except haproxy.AdminTimeout as exc:  # it exists and says nothing: stopped (SIGSTOP) or hung
        pid = (program.info or {}).get("pid") if program is not None else None
        return None, f"HAProxy does not answer ({f'pid {pid}' if pid else 'pid unknown'}, stopped?): {exc}"
    except Exception as exc:  # noqa: BLE001 - no socket, refused, not HAProxy: said, never raised
        return None, f"HAProxy's admin socket: {exc}"


def _leftovers(supervisor: Supervisor) -> tuple[int, ...]:
    try:
        return tuple(supervisor.leftovers())
    except Exception:  # noqa: BLE001 - a /proc walk that fails finds nothing to report
        return ()

