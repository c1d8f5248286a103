"""Drive supervisord through its XML-RPC API on a unix socket: never by parsing supervisorctl text."""
from __future__ import annotations

import http.client
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import xmlrpc.client
from xml.parsers.expat import ExpatError
from pathlib import Path

from supervisor.states import ProcessStates

from ds4_converge.core.layout import Layout
from ds4_converge.errors import Ds4Error
from ds4_converge.core import processes

DEAD_STATES = {"EXITED", "FATAL", "BACKOFF", "STOPPED", "UNKNOWN"}
# states stopProcess refuses with NOT_RUNNING: asking anyway costs the fault's reading, supervisor.xmlrpc's import
# (a third of a second), in the middle of a switch (BACKOFF is not here: stopping it keeps it from starting again)
NOT_RUNNING_STATES = {"STOPPED", "EXITED", "FATAL"}


class SupervisorError(Ds4Error):
    pass


class SupervisorGone(SupervisorError):
    """Nothing listens on the socket: no socket file, or the stale one of a supervisord that is gone."""


# Every call to supervisord is bounded: a stopped (SIGSTOP) or hung supervisord, or a foreign listener on the
# socket, ends in a SupervisorError that says so instead of a wait without end. supervisord answers any call we
# make in milliseconds; stopping is polled by us (stop()), never waited for inside one call.
CONNECT_TIMEOUT_S = 5
CALL_TIMEOUT_S = 10
# what a killed supervisord left gets this long after SIGTERM (supervisord's own stopwaitsecs is gone with it)
LEFTOVER_GRACE_S = 30


def this_python() -> str:
    """This environment's interpreter, named the same however the tool was started (`python -m`, `python3 -m`, the
    ds4-converge script): a rendered config must not change with that."""
    for name in (f"python{sys.version_info.major}", "python"):
        candidate = os.path.join(sys.prefix, "bin", name)
        if os.path.exists(candidate) and os.path.samefile(candidate, sys.executable):
            return candidate
    return sys.executable


def supervisord_argv(conf: Path, *, foreground: bool = False) -> list[str]:
    """supervisord from the same environment as this tool, so versions always match."""
    return [this_python(), "-m", "supervisor.supervisord", *(["--nodaemon"] if foreground else []), "-c", str(conf)]


GUARD = "ds4c.switch-guard"  # a name server.name cannot take (it allows no '.')


def guard_argv(root: Path) -> list[str]:
    """The switch guard (service/guard.py), run by supervisord from the same environment as this tool."""
    return [this_python(), "-m", "ds4_converge.service.guard", str(root)]


WATCHDOG = "ds4c.watchdog"  # service/watchdog.py (not imported here: the no-op path stays lean)


def watchdog_argv(root: Path) -> list[str]:
    """The watchdog between runs (service/watchdog.py), run by supervisord like the guard."""
    return [this_python(), "-m", "ds4_converge.service.watchdog", str(root)]


KEPT_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "HOME", "USER", "LOGNAME")


def daemon_environment() -> dict[str, str]:
    """What supervisord (and so the engine) inherits: the basics only. The engine's environment is declared in
    the spec, never leaked from the shell that ran us (HF_TOKEN, a stale NVCC, CUDA_VISIBLE_DEVICES …)."""
    return {k: v for k, v in os.environ.items() if k in KEPT_ENV}


def _faults():
    """supervisor's fault codes; imported only when a fault is read (supervisor.xmlrpc is slow to import)."""
    from supervisor.xmlrpc import Faults

    return Faults


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(min(self.timeout, CONNECT_TIMEOUT_S))  # a listener whose backlog is full
        self.sock.connect(self._path)
        self.sock.settimeout(self.timeout)


class _UnixTransport(xmlrpc.client.Transport):
    """XML-RPC over supervisord's unix socket: what supervisor.xmlrpc.SupervisorTransport does for us, from the
    standard library alone, so every run does not pay for importing supervisor's HTTP server modules."""

    def __init__(self, path: Path, timeout: float = CALL_TIMEOUT_S):
        super().__init__()
        self._path, self._timeout = str(path), timeout

    def make_connection(self, host):
        return _UnixConnection(self._path, self._timeout)


class _BoundedRpc:
    """supervisord's `supervisor.*` methods, each call bounded and its failure a SupervisorError naming the socket
    and the method (a Fault, supervisord's own answer, is passed on for the caller to read)."""

    def __init__(self, path: Path, timeout: float = CALL_TIMEOUT_S):
        self._path, self._timeout = path, timeout
        self._proxy = xmlrpc.client.ServerProxy("http://localhost", transport=_UnixTransport(path, timeout)).supervisor

    def __getattr__(self, method: str):
        remote = getattr(self._proxy, method)

        def call(*args):
            try:
                return remote(*args)
            except xmlrpc.client.Fault:
                raise
            except (ConnectionRefusedError, FileNotFoundError) as exc:
                raise SupervisorGone(f"supervisord is not running on {self._path} ({exc.strerror})") from None
            except TimeoutError:
                raise SupervisorError(
                    f"supervisord on {self._path} did not answer {method} within {self._timeout:.0f}s: it is "
                    f"stopped or hung, or something else listens on its socket (see {self._path.parent}/"
                    f"supervisord.pid)") from None
            except (OSError, ValueError, ExpatError, xmlrpc.client.Error, http.client.HTTPException) as exc:
                raise SupervisorError(f"supervisord on {self._path} does not answer {method}: "
                                      f"{type(exc).__name__}: {str(exc)[:200]}") from None

        return call


class Supervisor:
    def __init__(self, layout: Layout):
        self.layout = layout

    def _rpc(self) -> _BoundedRpc:
        return _BoundedRpc(self.layout.socket)

    def is_running(self, settle: float = 30) -> bool:
        """True when supervisord answers. False only when nothing listens on its socket (no socket, or a stale
        one); any other error is raised: taking a busy or unreachable supervisord for "not running" would start
        a second one on top of it. A supervisord that is reloading is waited for (up to `settle` seconds)."""
        deadline = time.monotonic() + settle
        while True:
            if not self.layout.socket.exists():
                return False
            try:
                state = self._rpc().getState()
            except SupervisorGone:
                return False  # nothing listens: the socket file of a supervisord that is gone
            except xmlrpc.client.Fault as fault:
                raise SupervisorError(f"{self.layout.socket} answers, but not as supervisord: {fault}") from None
            statename = state.get("statename") if isinstance(state, dict) else None
            if statename is None:
                raise SupervisorError(f"{self.layout.socket} answers, but not as supervisord: {str(state)[:80]}")
            if statename == "RUNNING":
                return True
            if statename not in ("RESTARTING", "SHUTDOWN") or time.monotonic() > deadline:
                raise SupervisorError(f"supervisord on {self.layout.socket} is {statename}")
            time.sleep(0.1)  # reloading or shutting down: ask again until it runs or its socket is gone

    def leftovers(self) -> list[int]:
        """What a dead supervisord of this root left running (SIGKILL, the OOM killer): its engines (processes of
        this root's releases), its switch guard, its watchdog and its front door (HAProxy with this root's
        config), orphaned. Ours, not foreign: nothing else runs our releases or reads our config.
        Empty while supervisord runs (then it owns what runs)."""
        if self.is_running():
            return []
        helpers = {pid for argv in (guard_argv(self.layout.root), watchdog_argv(self.layout.root))
                   for pid in processes.running_argv([os.fsencode(arg) for arg in argv[-2:]])}
        return sorted(set(processes.running_under(self.layout.releases)) | helpers | set(self._front_processes()))

    def front_leftovers(self) -> list[int]:
        """The front door's HAProxy (master and workers) of this root that runs without its supervisord: the
        processes that read this root's config (`-f ROOT/front/haproxy.cfg`). Empty while supervisord runs."""
        return [] if self.is_running() else self._front_processes()

    def _front_processes(self) -> list[int]:
        config = self.layout.front_config
        return processes.running_with([b"-f", os.fsencode(config)]) if config.exists() else []

    def stop_leftovers(self, grace: float = LEFTOVER_GRACE_S) -> list[int]:
        """Stop what a dead supervisord left (see leftovers), as stop() would: SIGTERM to each process group,
        SIGKILL after `grace`. Returns the pids stopped."""
        found = self.leftovers()
        groups = {group for group in (processes.read(pid) for pid in found) if group is not None}
        for process in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pgid, signal.SIGTERM)
        for process in groups:
            wait_group_gone(process.pgid, grace)
        return found

    def start_daemon(self, timeout: float = 30) -> None:
        """Start supervisord (it daemonizes) and wait until its socket answers; what a killed supervisord of this
        root left running is stopped first, so the fresh one starts its programs on a free port."""
        self.stop_leftovers()
        self.layout.socket.unlink(missing_ok=True)  # a stale socket from a killed supervisord
        proc = subprocess.run(supervisord_argv(self.layout.supervisord_conf), cwd=self.layout.root,
                              env=daemon_environment(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if proc.returncode:
            raise SupervisorError(f"supervisord failed to start: {proc.stderr.strip()[-500:]}")
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.is_running():
                return
            time.sleep(0.1)
        raise SupervisorError(f"supervisord did not answer on {self.layout.socket} within {timeout:.0f}s")

    def shutdown(self, timeout: float = 60) -> None:
        if not self.is_running():
            return
        pid = self._daemon_pid()
        self._rpc().shutdown()
        deadline = time.monotonic() + timeout
        while pid and _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)

    def _daemon_pid(self) -> int | None:
        try:
            return int(self.layout.supervisord_pid.read_text().strip())
        except (OSError, ValueError):
            return None

    def info(self, name: str) -> dict | None:
        try:
            return self._rpc().getProcessInfo(name)
        except xmlrpc.client.Fault as fault:
            if fault.faultCode == _faults().BAD_NAME:
                return None
            raise

    def all_processes(self) -> list[dict]:
        """Every program supervisord runs; nothing when supervisord is down. An error is raised, never read as
        "no programs": that would take our own engine for a foreign holder of the port."""
        if not self.is_running():
            return []
        try:
            return self._rpc().getAllProcessInfo()
        except (SupervisorError, xmlrpc.client.Fault) as exc:
            raise SupervisorError(f"cannot list supervisord's programs: {exc}") from None

    def owns(self, pids) -> set[int]:
        """Those of `pids` that are a program our supervisord runs under this root, or run below one (or, with
        supervisord dead, what it left: leftovers()): never a foreign process, whatever its name."""
        pids = list(pids)
        supervised = {info["pid"] for info in self.all_processes() if info["pid"]} or set(self.leftovers())
        return processes.descending_from(pids, supervised)

    def running_pid(self, name: str, *, starting: bool = False) -> int | None:
        """The program's PID while supervisord says RUNNING (and, with `starting`, STARTING: within startsecs an
        engine may already answer)."""
        info = self.info(name) if self.is_running() else None
        states = {"RUNNING", "STARTING"} if starting else {"RUNNING"}
        return info["pid"] if info and info["statename"] in states and info["pid"] else None

    def stop(self, name: str, grace: float) -> None:
        """SIGTERM through supervisord, then wait until the whole process group is gone (GPU memory with it):
        SIGKILL after `grace`. The wait is ours, not inside one call, so every call to supervisord stays short.

        A ds4 distributed worker only notes the first SIGTERM (its loop never reads the flag) and exits 130 on
        the second: its program file says so (IGNORES_FIRST_TERM), and it gets one SIGTERM here first."""
        info = self.info(name)
        if info is None or info["statename"] in NOT_RUNNING_STATES:
            return
        pgid = info["pid"] or None
        if info["statename"] == "RUNNING" and self._ignores_first_term(name):
            with contextlib.suppress(xmlrpc.client.Fault):
                self._rpc().signalProcess(name, "TERM")
                time.sleep(0.05)  # its handler has run before supervisord's SIGTERM arrives
        try:
            self._rpc().stopProcess(name, False)
        except xmlrpc.client.Fault as fault:
            if fault.faultCode != _faults().NOT_RUNNING:
                raise
        if pgid:
            wait_group_gone(pgid, grace)
        self._wait_stopped(name)

    def _wait_stopped(self, name: str, timeout: float = 10) -> None:
        """supervisord notices the exit of what it stopped within its own tick (about a second)."""
        deadline = time.monotonic() + timeout
        while True:
            info = self.info(name)
            if info is None or info["statename"] != "STOPPING":
                return
            if time.monotonic() > deadline:
                raise SupervisorError(f"supervisord still reports {name} STOPPING {timeout:.0f}s after its "
                                      f"process group was gone")
            time.sleep(0.1)

    def _ignores_first_term(self, name: str) -> bool:
        try:
            return IGNORES_FIRST_TERM in self.layout.program_conf(name).read_text()
        except OSError:
            return False

    def _reload_group(self, name: str, *, grace: float):
        """supervisord re-reads its config; the group `name` is replaced (stopped within grace) or added as the
        files say now. Returns the XML-RPC proxy for what the caller does next."""
        rpc = self._rpc()
        try:
            added, changed, removed = rpc.reloadConfig()[0]
        except xmlrpc.client.Fault as fault:
            raise SupervisorError(f"supervisord rejected the config: {fault.faultString}") from None
        if name in changed or name in removed:
            self.stop(name, grace=grace)
            rpc.removeProcessGroup(name)
        if name in changed or name in added:
            rpc.addProcessGroup(name)  # autostart=true starts it
        return rpc

    def load(self, name: str) -> None:
        """Make supervisord run the program file as written now: re-read, replace the group, start it."""
        rpc = self._reload_group(name, grace=60)
        info = self.info(name)
        if info and info["state"] not in (ProcessStates.RUNNING, ProcessStates.STARTING):
            try:
                rpc.startProcess(name, False)
            except xmlrpc.client.Fault as fault:
                if fault.faultCode != _faults().ALREADY_STARTED:
                    raise

    def apply_program(self, name: str, *, wait_running: bool = False, timeout: float = 10) -> None:
        """A program of supervisord.conf itself (the front door) as that file says now: re-read; added, changed
        (restarted) or removed. wait_running: until it runs (startsecs passed), else a SupervisorError."""
        rpc = self._reload_group(name, grace=10)
        info = self.info(name)
        if info is not None and info["statename"] in NOT_RUNNING_STATES | {"BACKOFF"}:
            with contextlib.suppress(xmlrpc.client.Fault):
                rpc.startProcess(name, False)
        deadline = time.monotonic() + timeout
        while wait_running:
            info = self.info(name)
            if info is not None and info["statename"] == "RUNNING":
                return
            if info is None or info["statename"] == "FATAL" or time.monotonic() > deadline:
                state = info["statename"] if info else "not loaded"
                why = info["spawnerr"] if info and info["spawnerr"] else "see its log"
                raise SupervisorError(f"{name} is {state} ({why}) after {timeout:.0f}s")
            time.sleep(0.1)

    def signal(self, name: str, sig: str) -> None:
        self._rpc().signalProcess(name, sig)

    def ensure_guard(self) -> None:
        """Make sure supervisord runs the switch guard and the watchdog: a supervisord started from an older
        supervisord.conf learns them from the file now (re-read, added), and one that is not running is started."""
        rpc = self._rpc()
        added, changed, removed = rpc.reloadConfig()[0]
        for name in (GUARD, WATCHDOG):
            if name in changed or name in removed:
                self.stop(name, grace=10)
                rpc.removeProcessGroup(name)
            if name in added or name in changed:
                rpc.addProcessGroup(name)
            info = self.info(name)
            if info is None:
                raise SupervisorError(f"supervisord has no {name} program: {self.layout.supervisord_conf} is stale")
            if info["statename"] not in ("RUNNING", "STARTING"):
                try:
                    rpc.startProcess(name, True)
                except xmlrpc.client.Fault as fault:
                    if fault.faultCode != _faults().ALREADY_STARTED:
                        raise SupervisorError(f"cannot start {name}: {fault.faultString}") from None

    def await_autostart(self, name: str, timeout: float = 10) -> None:
        """Right after supervisord started: wait until it has spawned `name` (autostart), start it if it has not."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            info = self.info(name)
            if info is not None and info["statename"] != "STOPPED":
                return
            time.sleep(0.05)
        try:
            self._rpc().startProcess(name, False)
        except xmlrpc.client.Fault as fault:
            if fault.faultCode != _faults().ALREADY_STARTED:
                raise SupervisorError(f"supervisord did not start {name}: {fault.faultString}") from None

    def remove(self, name: str) -> None:
        rpc = self._rpc()
        self.stop(name, grace=60)
        try:
            rpc.removeProcessGroup(name)
        except xmlrpc.client.Fault as fault:
            if fault.faultCode != _faults().BAD_NAME:
                raise


#: the line a program file carries when its process needs a second SIGTERM to stop (written by service/render.py)
IGNORES_FIRST_TERM = "; stop: this process ignores the first SIGTERM (a ds4 distributed worker)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _group_exists(pgid: int) -> bool:
    """One syscall; only a group that still exists (zombies count) needs the walk of /proc."""
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def wait_group_gone(pgid: int, grace: float) -> None:
    """Stragglers of the group outlive the main process sometimes; SIGKILL them after the grace period."""
    deadline = time.monotonic() + grace
    while _group_exists(pgid) and processes.group_members(pgid):
        if time.monotonic() > deadline:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                return
            time.sleep(0.2)
            return
        time.sleep(0.1)
