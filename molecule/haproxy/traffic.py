#!/usr/bin/env python3
"""A steady stream of chat requests through HAProxy, and what HAProxy said about each server meanwhile.

    traffic.py start DIR URL SOCKET [KEYFILE]   start in the background (writes DIR/traffic.pid), return at once
    traffic.py stop DIR                         stop it and wait until DIR/traffic.json is written
    traffic.py run DIR URL SOCKET [KEYFILE]     the stream itself (what `start` runs)

With KEYFILE, every request carries `Authorization: Bearer KEY` (a box with its own front door wants one).

Two clients send POST URL/v1/chat/completions one after another (a new connection each, as the engine serves one
request per connection), each answer's status, its X-Ds4-Server header (the server HAProxy chose) and when it
started and ended; a poller reads `show stat` from HAProxy's admin socket every 50 ms (each server's status:
UP, DOWN, MAINT, DRAIN), through the collection's runtime client (plugins/module_utils/haproxy_runtime.py, the one
the module haproxy_server uses). Bounded: it ends by itself after MAX_SECONDS or MAX_REQUESTS, loopback only.
"""
from __future__ import annotations

import http.client
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

CLIENTS = 2
MAX_SECONDS = 480
MAX_REQUESTS = 40000
REQUEST_TIMEOUT_S = 30
POLL_S = 0.05
BODY = json.dumps({"model": "deepseek-v4-flash", "max_tokens": 4, "stream": False,
                   "messages": [{"role": "user", "content": "ping"}]}).encode()


def _runtime_client():
    """plugins/module_utils/haproxy_runtime.py of this checkout, loaded as a plain file (it needs no Ansible)."""
    path = Path(__file__).resolve().parents[2] / "plugins" / "module_utils" / "haproxy_runtime.py"
    spec = importlib.util.spec_from_file_location("haproxy_runtime", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.RuntimeClient


def run(state: Path, url: str, admin: str, key_file: str | None = None) -> None:
    headers = {"Content-Type": "application/json"}
    if key_file:
        headers["Authorization"] = f"Bearer {Path(key_file).read_text().strip()}"
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    target = urlsplit(url)
    answers, polls, lock = [], [], threading.Lock()
    deadline = time.monotonic() + MAX_SECONDS

    def client() -> None:
        while not stop.is_set() and time.monotonic() < deadline:
            started = time.time()
            entry = {"start": started}
            try:
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=REQUEST_TIMEOUT_S)
                conn.request("POST", "/v1/chat/completions", body=BODY, headers=headers)
                response = conn.getresponse()
                body = response.read()
                entry.update(status=response.status, server=response.getheader("X-Ds4-Server"),
                             ok=response.status == 200 and b'"chat.completion"' in body)
                if not entry["ok"]:  # who said no, and how: HAProxy's error page or the engine's JSON
                    entry["body"] = body[:300].decode("utf-8", "replace")
                conn.close()
            except (OSError, http.client.HTTPException) as exc:
                entry.update(status=None, server=None, ok=False, error=f"{type(exc).__name__}: {exc}")
            entry["end"] = time.time()
            with lock:
                answers.append(entry)
                if len(answers) >= MAX_REQUESTS:
                    stop.set()

    haproxy = _runtime_client()(admin, timeout=5)

    def poller() -> None:
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                polls.append({"at": time.time(), "servers": haproxy.statuses()})
            except (OSError, ValueError) as exc:  # no socket yet, or an answer that is not `show stat`'s
                polls.append({"at": time.time(), "error": str(exc)})
            time.sleep(POLL_S)

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)] + [threading.Thread(target=poller)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    tmp = state / ".traffic.json.tmp"
    tmp.write_text(json.dumps({"answers": answers, "polls": polls}))
    os.replace(tmp, state / "traffic.json")


def start(state: Path, url: str, admin: str, key_file: str | None = None) -> int:
    state.mkdir(parents=True, exist_ok=True)
    (state / "traffic.json").unlink(missing_ok=True)
    with open(state / "traffic.log", "ab") as log:
        argv = [sys.executable, __file__, "run", str(state), url, admin, *([key_file] if key_file else [])]
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    (state / "traffic.pid").write_text(f"{child.pid}\n")
    print(child.pid)
    return 0


def stop(state: Path) -> int:
    try:
        pid = int((state / "traffic.pid").read_text())
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        print("not running")
        return 0
    deadline = time.monotonic() + REQUEST_TIMEOUT_S + 10
    while time.monotonic() < deadline:
        if (state / "traffic.json").exists():
            print(f"stopped {pid}")
            return 0
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    print(f"traffic {pid} did not stop in time", file=sys.stderr)
    return 1


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["run"] and len(args) in (4, 5):
        run(Path(args[1]), *args[2:])
    elif args[:1] == ["start"] and len(args) in (4, 5):
        sys.exit(start(Path(args[1]), *args[2:]))
    elif args[:1] == ["stop"] and len(args) == 2:
        sys.exit(stop(Path(args[1])))
    else:
        sys.exit(__doc__)
