"""Warm start, the resident side: import the tool once, then fork one fresh run per command (see warm.py).

The process binds its socket first (a second one started for the same key finds the name taken and leaves), then
imports everything a command may need, compiles the templates and builds the argument parser, then answers.
Nothing of a run (its state, locks, facts, caches) is ever made here: each child starts from the imports alone.
A child becomes the leader of a session of its own, takes the caller's standard streams, environment, working
directory, umask and arguments, runs `main`, and sends its exit code back. The process leaves when nobody asked for DS4_CONVERGE_WARM_IDLE_S
seconds, or when its key no longer matches the files it imported.
"""
from __future__ import annotations

import importlib
import json
import os
import pkgutil
import signal
import socket
import sys
import time

from ds4_converge.cli import warm

# what commands import when they run, beyond the package's own modules (imported here all at once)
LIBRARIES = ("pydantic", "ruamel.yaml", "ruamel.yaml.comments", "ruamel.yaml.scalarstring", "yaml", "jinja2",
             "tenacity", "xmlrpc.client", "supervisor.xmlrpc", "rich.console", "rich.text", "rich.table",
             "rich.markup", "rich.live", "rich.spinner", "rich.progress", "argparse", "difflib", "tarfile",
             "tempfile", "datetime", "traceback", "http.client", "importlib.metadata", "importlib.resources")
SKIPPED = ("__main__", "warm_server")  # importing these runs them
# huggingface_hub reads HF_HOME, HF_HUB_OFFLINE, ... when it is imported: a download imports it in the run itself,
# under the caller's environment (a download's own time dwarfs that import anyway)
NOT_PRELOADED = ("ds4_converge.models.download",)


def serve(with_key: str) -> None:
    """The warm process for `with_key` (started by warm.start_if_missing, detached)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(warm.address(with_key))
    except OSError:
        return  # another one serves this key, or is starting
    listener.listen(16)
    os.chdir("/")  # hold no folder of the caller's (each run changes to its caller's)
    log = _Log(with_key)
    _preload()
    if warm.key() != with_key:  # the tool changed while importing, or this process cannot import as its caller
        log.write("exiting: the tool or its libraries differ from the key it was started for")
        return
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children; their callers get the codes
    signal.signal(signal.SIGTERM, _leave)  # `kill PID` removes the pid file on the way out
    idle = _idle_seconds()
    log.pidfile(present=True)
    log.write(f"serving (pid {os.getpid()}, idle exit after {idle:.0f}s)")
    listener.settimeout(idle)
    try:
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                log.write("exiting: idle")
                return
            try:
                _answer(listener, conn, with_key, log)
            except Exception as exc:  # noqa: BLE001 - one caller's broken request never takes the process down
                log.write(f"request failed: {type(exc).__name__}: {exc}")
            finally:
                conn.close()
            if warm.key() != with_key:
                log.write("exiting: the tool's files or libraries changed")
                return
    finally:
        log.pidfile(present=False)


def _leave(signum, frame) -> None:
    raise SystemExit(0)


def _preload() -> None:
    import ds4_converge

    for module in pkgutil.walk_packages(ds4_converge.__path__, "ds4_converge."):
        if module.name.rsplit(".", 1)[-1] not in SKIPPED and module.name not in NOT_PRELOADED:
            _try_import(module.name)
    for name in LIBRARIES:
        _try_import(name)
    from ds4_converge.service import render  # jinja2 compiles each template once (it re-reads a changed one)

    render.compile_templates()
    from ds4_converge.cli.main import WIDE, parser_for, registry

    for width in (WIDE, 78):  # a wide terminal's, and no terminal's (80 columns)
        parser_for(registry(), width)


def _try_import(name: str) -> None:
    try:
        importlib.import_module(name)
    except Exception:  # noqa: BLE001 - a module that cannot load here is imported (and fails) in the run itself
        pass


def _idle_seconds() -> float:
    try:
        return max(1.0, float(os.environ.get(warm.IDLE_ENV, warm.IDLE_S)))
    except ValueError:
        return warm.IDLE_S


def _answer(listener: socket.socket, conn: socket.socket, with_key: str, log: "_Log") -> None:
    conn.settimeout(10)
    request, fds = _receive(conn)
    try:
        refusal = _refusal(conn, request, with_key) or (None if len(fds) == 3 else "standard streams missing")
        if refusal:
            log.write(f"refused: {refusal}")
            conn.sendall(json.dumps({"refused": refusal}).encode() + b"\n")
            return
        pid = os.fork()
        if pid == 0:
            _child(listener, conn, fds, request)  # never returns
        log.write(f"run {pid}: {' '.join(request['argv'])}")
    finally:
        for fd in fds:
            os.close(fd)


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    try:
        return _read_request(conn, data), list(fds)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _read_request(conn: socket.socket, data: bytes) -> dict:
    while len(data) < warm.HEADER.size:
        more = conn.recv(1 << 16)
        if not more:
            raise ValueError("request cut short")
        data += more
    (length,) = warm.HEADER.unpack_from(data)
    body = data[warm.HEADER.size:]
    while len(body) < length:
        more = conn.recv(min(1 << 20, length - len(body)))
        if not more:
            raise ValueError("request cut short")
        body += more
    return json.loads(body)


def _refusal(conn: socket.socket, request: dict, with_key: str) -> str | None:
    import struct

    pid, uid, gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    if uid != os.getuid() or gid != os.getgid():
        return f"caller pid {pid} runs as uid {uid} gid {gid}, this process as {os.getuid()} {os.getgid()}"
    if request.get("protocol") != warm.PROTOCOL or request.get("key") != with_key:
        return "another protocol or key"
    if sorted(request.get("groups", [])) != sorted(os.getgroups()):
        return "the caller's supplementary groups differ"
    if _caller_gone(conn):  # it gave up waiting (this process was still importing) and runs the command itself
        return "the caller is gone"
    return None


def _caller_gone(conn: socket.socket) -> bool:
    timeout = conn.gettimeout()
    conn.settimeout(None)  # with a timeout, Python would wait for data before even trying
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    finally:
        conn.settimeout(timeout)


def _child(listener: socket.socket, conn: socket.socket, fds: list[int], request: dict) -> None:
    """The forked run: become the caller's process, run the command, report its exit code, exit."""
    code = 70
    try:
        for signum in (signal.SIGCHLD, signal.SIGTERM):  # as in any new process (subprocess needs SIGCHLD)
            signal.signal(signum, signal.SIG_DFL)
        listener.close()
        os.setsid()  # a process group of its own: the caller relays a terminal's signals to all of it
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.chdir(request["cwd"])
        os.umask(request["umask"])
        os.environ.clear()
        os.environ.update(request["env"])
        time.tzset()  # local time as the caller's TZ says
        if "random" in sys.modules:
            sys.modules["random"].seed()  # not the same sequence as every other child
        sys.path[:] = request["path"]
        sys.argv = [request["argv0"], *request["argv"]]
        _streams(request["streams"])
        conn.settimeout(None)
        conn.sendall(json.dumps({"pid": os.getpid()}).encode() + b"\n")
        from ds4_converge.cli import main

        code = main.run(request["argv"], replay=False)  # the caller tried the receipt
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        conn.sendall(json.dumps({"exit": code}).encode() + b"\n")
    except BaseException:  # noqa: BLE001 - a child never goes back into the server's loop
        pass
    finally:
        os._exit(code)


def _streams(spec: dict) -> None:
    """stdin, stdout and stderr as the caller's Python made them (encoding, errors, buffering)."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        wanted = spec[name]
        stream = open(fd, mode, encoding=wanted["encoding"], errors=wanted["errors"], closefd=False)
        if mode == "w":
            stream.reconfigure(line_buffering=wanted["line_buffering"], write_through=wanted["write_through"])
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


class _Log:
    """One line per event in FOLDER/KEY.log (kept short), the pid in FOLDER/KEY.pid while serving."""

    def __init__(self, with_key: str):
        self.folder = warm.folder()
        self.path = os.path.join(self.folder, f"{with_key}.log") if self.folder else None
        self.pid_path = os.path.join(self.folder, f"{with_key}.pid") if self.folder else None

    def write(self, text: str) -> None:
        if self.path is None:
            return
        try:
            os.makedirs(self.folder, exist_ok=True)
            if os.path.exists(self.path) and os.path.getsize(self.path) > 1 << 20:
                os.replace(self.path, self.path + ".1")
            with open(self.path, "a") as handle:
                handle.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n")
        except OSError:
            pass

    def pidfile(self, present: bool) -> None:
        if self.pid_path is None:
            return
        try:
            if present:
                os.makedirs(self.folder, exist_ok=True)
                with open(self.pid_path, "w") as handle:
                    handle.write(f"{os.getpid()}\n")
            else:
                os.unlink(self.pid_path)
        except OSError:
            pass
