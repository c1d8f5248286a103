"""Fixtures for the model-files library: tiny GGUF files and a loopback HTTP file server with Range support."""
from __future__ import annotations

import re
import socket
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "engine" / "models"))

import make_tiny_gguf as tiny_gguf  # noqa: E402

from ds4_converge.engine_knowledge import load as load_knowledge  # noqa: E402


@pytest.fixture(autouse=True)
def _no_network(monkeypatch, tmp_path):
    """Nothing in these tests may leave the machine: any non-loopback connect fails loudly."""
    real_connect = socket.socket.connect

    def guarded(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and host not in ("127.0.0.1", "::1", "localhost") and not host.startswith("/"):
            raise AssertionError(f"test tried to reach the network: {address}")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    # keep huggingface_hub away from the real Hub and from any real token on this machine
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_TOKEN_PATH", str(tmp_path / "no-hf-token"))


# ----------------------------------------------------------------------------------------- GGUF files
# one writer for the whole project: engine/models/make_tiny_gguf.py (typed metadata as the real engine reads it)

@pytest.fixture(name="write_gguf")
def write_gguf_fixture():
    return tiny_gguf.write


@dataclass
class GgufSet:
    main: Path
    main_0731: Path
    mtp: Path
    dspark_legacy: Path
    dspark_0731: Path
    main_bad_block_count: Path
    not_gguf: Path


@pytest.fixture(scope="session")
def gguf_files(tmp_path_factory) -> GgufSet:
    d = tmp_path_factory.mktemp("gguf")
    k = tiny_gguf.knowledge()  # the fork's: the drafter and the 0731 marker are its facts
    main_kv = tiny_gguf.main_model_kv(k)
    variant = {k["gguf"]["generation"]["variant_key"]: k["gguf"]["generation"]["newer"]}
    dspark_kv = tiny_gguf.dspark_kv(k)
    blk = tiny_gguf.main_tensors(k)
    drafter = ["dspark.0.attn_norm.weight"]
    not_gguf = d / "not-a-model.gguf"
    not_gguf.write_bytes(b"<html>rate limited</html>")
    write = tiny_gguf.write
    return GgufSet(
        main=write(d / "main.gguf", "deepseek4", main_kv, blk),
        main_0731=write(d / "main-0731.gguf", "deepseek4", {**main_kv, **variant}, blk),
        mtp=write(d / "mtp.gguf", "deepseek4", {}, tiny_gguf.mtp_tensors(k)),
        dspark_legacy=write(d / "dspark.gguf", "deepseek4-dspark", dspark_kv, drafter),
        dspark_0731=write(d / "dspark-0731.gguf", "deepseek4-dspark", {**dspark_kv, **variant}, drafter),
        main_bad_block_count=write(d / "bad.gguf", "deepseek4", {**main_kv, "deepseek4.block_count": 61}, blk),
        not_gguf=not_gguf,
    )


# ------------------------------------------------------------------------------------ loopback server

@dataclass
class Served:
    path: str
    headers: dict
    status: int
    sent: int = 0          # body bytes written
    aborted: bool = False  # the client hung up before taking the whole body


@dataclass
class FileServer:
    """Serves `files` by URL path. Switches act on every request until reset, except `cut_after` (next one)."""

    base_url: str = ""
    files: dict[str, bytes] = field(default_factory=dict)
    extra_headers: dict[str, dict] = field(default_factory=dict)
    redirects: dict[str, str] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)  # answer these paths with this status, no body
    requests: list[Served] = field(default_factory=list)
    cut_after: int | None = None
    ignore_range: bool = False
    corrupt_at: int | None = None
    required_auth: str | None = None

    def url(self, path: str) -> str:
        return self.base_url + path


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: FileServer  # set per server class

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:
        st = self.state
        path = self.path.split("?")[0]
        if path in st.statuses:
            return self._reply(path, st.statuses[path], b"", {})
        if path in st.redirects:
            return self._reply(path, 302, b"", {"Location": st.redirects[path], **st.extra_headers.get(path, {})})
        if st.required_auth is not None and self.headers.get("Authorization") != st.required_auth:
            return self._reply(path, 401, b"unauthorized", {})
        if path not in st.files:
            return self._reply(path, 404, b"not found", {})
        self._send_file(path, st.files[path])

    def _send_file(self, path: str, data: bytes) -> None:
        st = self.state
        if st.corrupt_at is not None and st.corrupt_at < len(data):
            data = data[:st.corrupt_at] + bytes([data[st.corrupt_at] ^ 0xFF]) + data[st.corrupt_at + 1:]
        headers = dict(st.extra_headers.get(path, {}))
        match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
        if match and not st.ignore_range:
            start = int(match.group(1))
            if start >= len(data):
                return self._reply(path, 416, b"", {**headers, "Content-Range": f"bytes */{len(data)}"})
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            return self._reply(path, 206, data[start:], headers)
        self._reply(path, 200, data, headers)

    def _reply(self, path: str, status: int, body: bytes, headers: dict) -> None:
        st = self.state
        # recorded before a single byte of the answer leaves: the client's next request (maybe on another
        # connection, so another server thread) can only come after, so `requests` is in the client's order
        from requests.structures import CaseInsensitiveDict  # here: only the HTTP tests (slow) pay its import

        served = Served(path, CaseInsensitiveDict(self.headers.items()), status)
        st.requests.append(served)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        cut = st.cut_after if status < 300 else None
        payload = body
        if cut is not None:
            st.cut_after, payload = None, body[:cut]
            self.close_connection = True  # the client sees fewer bytes than Content-Length
        try:
            self.wfile.write(payload)
            self.wfile.flush()
            served.sent = len(payload)
        except (BrokenPipeError, ConnectionResetError):
            served.aborted, self.close_connection = True, True


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        # clients hanging up mid-response is what several tests do on purpose
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


@pytest.fixture
def file_server():
    state = FileServer()
    handler = type("Handler", (_Handler,), {"state": state})
    server = _QuietServer(("127.0.0.1", 0), handler)
    state.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
