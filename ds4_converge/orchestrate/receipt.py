"""The no-op receipt: what a converge that found nothing to do relied on, so that the next one can tell in a few
milliseconds, with the standard library only, that nothing it relied on has changed.

A full run imports pydantic, validates the spec, gathers host facts and plans six roles: most of a no-op's
time. After a full converge that changed nothing, the CLI writes a receipt (cli/noop.py): the digest of the spec
file's bytes, the --set arguments, the tool's own fingerprint, the environment, the identity (device, inode, size,
mtime, ctime, mode) of every file the plans read (state, caches, rendered configs, the release binary, the model files,
the installer, the toolkit), the engine's and supervisord's processes (PID and kernel start time), the endpoint and
its model id, and the run's report. The next `ds4-converge SPEC` checks the receipt first (`still_holds`): it
re-reads every one of those, asks the endpoint for /v1/models, and only when all agree does it report the
recorded no-op again. Anything else (a byte of the spec, an argument, a file touched, the engine restarted, a run
in progress, a switch guard armed, no answer) is a full run, which plans from scratch as always.

Host facts read from commands (nvidia-smi, nvcc) are not re-read on this path: like Ansible's fact cache they are
trusted for FACTS_TTL_S after the full run gathered them; the binaries themselves and the driver's version file
are watched, so an upgrade is seen at once. `--refresh` (any argument but --json and --set) takes the full path.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from pathlib import Path

from ds4_converge.core import bounded_file
from ds4_converge.core.shell import CALLER_MAKE_ENV
from ds4_converge.core.processes import start_time

FORMAT = 2
FACTS_TTL_S = 900
PACKAGE = Path(__file__).resolve().parents[1]
DRIVER_VERSION = Path("/proc/driver/nvidia/version")
MAX_ANSWER = 1 << 20
MAX_SPEC_READ = 1 << 20  # above the loader's own cap: such a spec takes the full path, which refuses it
# what changes between two identical invocations, or only how the report looks, without changing what a run does
VOLATILE_ENV = frozenset({"_", "OLDPWD", "PWD", "SHLVL", "TERM", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR",
                          "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "SSH_AUTH_SOCK", "PYTEST_CURRENT_TEST",
                          "WINDOWID", "XDG_SESSION_ID", "PS1"}) | CALLER_MAKE_ENV  # make run's own: shell.py


def user_cache() -> str | None:
    """This user's ds4-converge cache folder (XDG_CACHE_HOME honoured); None when the user has no home for one."""
    base = os.environ.get("XDG_CACHE_HOME") or (os.path.expanduser("~") + "/.cache")
    return os.path.join(base, "ds4-converge") if base.startswith("/") else None


def receipt_path(spec: Path) -> Path | None:
    """Per user, per spec file; None when this user has no home to keep it in."""
    cache = user_cache()
    if cache is None:
        return None
    key = hashlib.sha256(os.path.realpath(spec).encode()).hexdigest()[:32]
    return Path(cache) / "noop" / f"{key}.json"


def inputs(spec: Path, arguments: list[str]) -> dict:
    """What the run was asked: the spec's bytes, the arguments, who asks, in which environment, with which tool.

    Raises OSError for a spec that is not a small regular file (a FIFO would block the read): the full path
    refuses it properly."""
    try:
        text = bounded_file.read(spec, MAX_SPEC_READ, "a spec")  # one open: no FIFO swapped in after a stat
    except bounded_file.FileRefused as exc:
        raise OSError(f"{spec}: {exc}") from None
    env = sorted((k, v) for k, v in os.environ.items() if k not in VOLATILE_ENV)
    return {"format": FORMAT, "spec": _sha256(text), "arguments": arguments, "uid": os.getuid(),
            "env": _sha256(json.dumps(env).encode()), "tool": tool_fingerprint()}


def tool_fingerprint() -> str:
    """Every file of this package by name, size and mtime, the engine knowledge and templates included (an
    editable install keeps those outside the package folder): an upgrade or an edit is another tool."""
    entries = []
    for top in _source_folders():
        for folder, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if not name.endswith(".pyc"):
                    path = os.path.join(folder, name)
                    st = os.stat(path)
                    entries.append(f"{path}:{st.st_size}:{st.st_mtime_ns}")
    return _sha256("\n".join(entries).encode())


def _source_folders() -> list[str]:
    from importlib.util import find_spec

    folders = [str(PACKAGE)]
    for name in ("ds4_converge.engine_knowledge", "ds4_converge.templates"):
        found = find_spec(name)
        for folder in (found.submodule_search_locations or []) if found else []:
            if not os.path.realpath(folder).startswith(str(PACKAGE) + os.sep):
                folders.append(folder)
    return folders


def identity(path: str) -> list[int] | None:
    """A file's identity: a rewrite, a replacement, a chmod or a touch changes it; None when it is missing."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode]


def driver_version() -> str | None:
    try:
        return _sha256(DRIVER_VERSION.read_bytes())
    except OSError:
        return None


def make(asked: dict, *, root: Path, files: list[str], processes: dict[str, int], endpoint: str,
         model_id: str, document: dict, facts_at: float) -> dict:
    return {**asked, "root": str(root), "files": {f: identity(f) for f in sorted(set(files))},
            "processes": {name: [pid, start_time(pid)] for name, pid in processes.items()},
            "endpoint": endpoint, "model_id": model_id, "driver": driver_version(),
            "facts_until": facts_at + FACTS_TTL_S, "document": document}


def save(path: Path, receipt: dict) -> None:
    """Best effort, atomic: a receipt that cannot be written only means the next no-op takes the full path."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp.write_text(json.dumps(receipt))
        os.replace(tmp, path)
    except OSError:
        forget(tmp)


def forget(path: Path | None) -> None:
    if path is not None:
        try:
            path.unlink()
        except OSError:
            pass


def load(path: Path) -> dict | None:
    try:
        receipt = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return receipt if isinstance(receipt, dict) and receipt.get("format") == FORMAT else None


def still_holds(receipt: dict, asked: dict, *, now: float | None = None) -> str | None:
    """None when everything the recorded no-op relied on is as it was; else what differs (for --debug and tests).

    The endpoint is asked last: it is the only check that is not a stat or a small read.
    """
    for key in ("spec", "arguments", "uid", "env", "tool"):
        if receipt.get(key) != asked[key]:
            return f"{key} changed"
    if (now or time.time()) >= receipt.get("facts_until", 0):
        return "host facts are older than the fact cache allows"
    if receipt.get("driver") != driver_version():
        return "the GPU driver changed"
    for path, was in receipt.get("files", {}).items():
        if identity(path) != was:
            return f"{path} changed"
    for name, (pid, started) in receipt.get("processes", {}).items():
        if started is None or start_time(pid) != started:
            return f"{name} (pid {pid}) is not the process it was"
    return _endpoint_answers(receipt.get("endpoint", ""), receipt.get("model_id", ""))


def _endpoint_answers(endpoint: str, model_id: str) -> str | None:
    """GET /v1/models over a plain socket: http.client's import (email, ssl) would cost this path a quarter of
    its time. HTTP/1.0, so the engine answers with a body and closes; any answer this does not expect (not 200,
    chunked, not JSON, the model not listed) sends the run down the full path, which asks properly."""
    host, _, port = endpoint.removeprefix("http://").partition(":")
    try:
        with socket.create_connection((host, int(port or 80)), timeout=5) as conn:
            conn.sendall(f"GET /v1/models HTTP/1.0\r\nHost: {host}\r\nAccept: application/json\r\n\r\n".encode())
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
                if len(answer) > MAX_ANSWER:
                    return f"{endpoint}/v1/models answered more than {MAX_ANSWER} bytes"
        head, _, body = answer.partition(b"\r\n\r\n")
        status, *headers = head.decode("latin-1").split("\r\n")
        if status.split()[1:2] != ["200"] or any(h.lower().startswith("transfer-encoding:") for h in headers):
            return f"{endpoint}/v1/models: {status}"
        ids = [m["id"] for m in json.loads(body)["data"]]
    except Exception as exc:  # noqa: BLE001 - whatever it is, the full path finds out and says it properly
        return f"{endpoint}/v1/models: {type(exc).__name__}"
    return None if model_id in ids else f"{endpoint}/v1/models does not list {model_id}"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
