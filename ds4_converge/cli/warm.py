"""Warm start, the client side: hand this command to a resident process that has the tool imported already.

A restart's own time, beyond the engine's load, is mostly Python starting and importing (pydantic and the spec
models, the roles, jinja2, supervisord's client): about 0.7 s of a second. The warm process (warm_server.py)
pays that once. For each command it forks a child that takes over this process's stdin, stdout and stderr (passed
over a Unix socket), its arguments, environment, working directory and umask, and runs the very same `main`; this
process relays signals to it and exits with its exit code. The pattern is Gradle's daemon and multiprocessing's
fork server: the child is a fresh run in everything but the imports.

When to use one (DS4_CONVERGE_WARM): `0` never; `1` always, starting one when none runs; unset (`auto`) use one
that runs, and start one only from a terminal (a person iterating on a spec), so that Ansible, CI and scripts
leave no resident process behind. It exits after DS4_CONVERGE_WARM_IDLE_S seconds without a command (600).

Only a process of the same user, interpreter, import path, installed libraries and tool files serves a command:
all of those are in the socket's name (`key`), so an upgrade or an edit of the tool starts another one, and the
old one idles out. Whatever goes wrong before the child runs (no warm process, a refusal, a broken socket), the
command runs here, as if there were none.
"""
from __future__ import annotations

import hashlib
import json
import locale
import os
import signal
import socket
import struct
import sys

from ds4_converge.cli.command import FAILED
from ds4_converge.orchestrate.receipt import tool_fingerprint, user_cache

ENV, IDLE_ENV = "DS4_CONVERGE_WARM", "DS4_CONVERGE_WARM_IDLE_S"
IDLE_S = 600.0
PROTOCOL = 1
CONNECT_TIMEOUT_S = 1.0
ANSWER_TIMEOUT_S = 30.0  # a warm process still importing answers within its start-up time
HEADER = struct.Struct("!I")
# signals a terminal sends to its whole foreground group; SIGTERM (kill, systemd, Ansible) goes to the run only
GROUP_SIGNALS = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)
RELAYED = (*GROUP_SIGNALS, signal.SIGTERM)


class _State:
    missing: str | None = None  # the key of a warm process this run looked for and did not find


def policy() -> str:
    """'off', 'on' or 'auto' from DS4_CONVERGE_WARM."""
    value = os.environ.get(ENV, "").strip().lower()
    if value in ("0", "off", "no", "false"):
        return "off"
    return "on" if value in ("1", "on", "yes", "true") else "auto"


def folder() -> str | None:
    """Where warm processes keep their pid file and log; None when this user has no home to keep it in."""
    cache = user_cache()
    return os.path.join(cache, "warm") if cache else None


def key(path: list[str] | None = None) -> str:
    """Everything a forked run inherits instead of importing: the user, the interpreter, the import path, the
    installed libraries (their folders' mtimes change with every install), the tool's own files, the mount and
    PID namespaces, the encodings fixed at start-up, and the folder of this user's warm processes."""
    path = import_path() if path is None else path
    libraries = []
    for entry in path[1:]:  # path[0] is the script's folder or the working directory: not a library
        try:
            libraries.append(os.stat(entry or ".").st_mtime_ns)
        except OSError:
            libraries.append(None)
    namespaces = []
    for name in ("mnt", "pid"):
        try:
            namespaces.append(os.readlink(f"/proc/self/ns/{name}"))
        except OSError:
            namespaces.append(None)
    encodings = [sys.getfilesystemencoding(), locale.getpreferredencoding(False)]  # fixed at the process's start
    parts = [PROTOCOL, os.getuid(), os.path.realpath(sys.executable), sys.version, path, libraries,
             tool_fingerprint(), namespaces, encodings, folder()]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def import_path() -> list[str]:
    """sys.path with '' (the working directory, `python -c`) made absolute: it means this folder, not the warm
    process's."""
    return [os.path.abspath(entry) if not os.path.isabs(entry) else entry for entry in sys.path]


def address(of_key: str) -> str:
    """A Linux abstract socket: no file to go stale, no path length limit, gone with its process."""
    return f"\0ds4-converge-warm-{of_key}"


def forward(argv: list[str]) -> int | None:
    """The exit code of the command run by a warm process; None: run it here."""
    mode = policy()
    if mode == "off" or folder() is None:
        return None
    with_key = key()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            sock.connect(address(with_key))
        except OSError:
            if mode == "on" or (mode == "auto" and _on_terminal()):
                _State.missing = with_key
            return None
        sock.settimeout(ANSWER_TIMEOUT_S)
        answers = sock.makefile("rb")
        # a signal between handing the command over and knowing the run's pid waits, then goes to that run
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, RELAYED)
        try:
            try:
                _send(sock, _request(argv, with_key))
                started = _answer(answers)
                pid = int(started["pid"]) if "pid" in started else None
            except (OSError, ValueError, TypeError):
                return None
            if pid is None:  # refused: say why only when asked to debug
                if "--debug" in argv:
                    sys.stderr.write(f"ds4-converge: the warm process refused this command: "
                                     f"{started.get('refused')}\n")
                return None
            return _relay_until_exit(sock, answers, pid, mask)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    finally:
        sock.close()


def start_if_missing() -> None:
    """After a command ran here because no warm process answered: start one for the next command."""
    if _State.missing is None:
        return
    import subprocess

    boot = ("import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
            "from ds4_converge.cli.warm_server import serve; serve(sys.argv[2])")
    try:
        subprocess.Popen([sys.executable, "-P", "-c", boot, json.dumps(import_path()), _State.missing],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, close_fds=True)
    except OSError:
        pass  # an optimisation: the next command runs here again
    _State.missing = None


def _on_terminal() -> bool:
    try:
        return os.isatty(0) and os.isatty(2)
    except OSError:
        return False


def _request(argv: list[str], with_key: str) -> dict:
    umask = os.umask(0)
    os.umask(umask)
    streams = {}
    for name in ("stdin", "stdout", "stderr"):
        stream = getattr(sys, name)
        streams[name] = {"encoding": getattr(stream, "encoding", None) or "utf-8",
                         "errors": getattr(stream, "errors", None) or "strict",
                         "line_buffering": bool(getattr(stream, "line_buffering", False)),
                         "write_through": bool(getattr(stream, "write_through", False))}
    return {"protocol": PROTOCOL, "key": with_key, "argv0": sys.argv[0], "argv": argv, "env": dict(os.environ),
            "cwd": os.getcwd(), "umask": umask, "groups": sorted(os.getgroups()), "path": import_path(),
            "streams": streams}


def _send(sock: socket.socket, request: dict) -> None:
    data = HEADER.pack(len(body := json.dumps(request).encode())) + body
    sent = socket.send_fds(sock, [data], [0, 1, 2])  # a stream socket may take only part of a big environment
    sock.sendall(data[sent:])


def _answer(answers) -> dict:
    line = answers.readline()
    if not line:
        raise ValueError("no answer")
    answer = json.loads(line)
    if not isinstance(answer, dict):
        raise ValueError("not an answer")
    return answer


def _relay_until_exit(sock: socket.socket, answers, pid: int, mask) -> int:
    """Pass signals on to the run (its process group for a terminal's), wait for its exit code."""
    def relay(signum, frame):
        try:
            if signum in GROUP_SIGNALS:
                os.killpg(pid, signum)
            else:
                os.kill(pid, signum)
        except OSError:
            pass

    previous = {signum: signal.signal(signum, relay) for signum in RELAYED}
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # what arrived meanwhile is relayed now
    try:
        sock.settimeout(None)
        line = answers.readline()
        return int(json.loads(line)["exit"])
    except (OSError, ValueError, KeyError, TypeError):  # it ran: never run it again here, whatever the answer
        sys.stderr.write(f"ds4-converge: the run (pid {pid}, forked by the warm process) ended without an exit "
                         f"status (killed?); `ds4-converge status SPEC` shows what serves now\n")
        return FAILED
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
