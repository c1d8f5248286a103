"""Drain before stop: wait until the engine is idle before a restart, an upgrade or a revert stops it.

ds4-server stops an in-flight generation on SIGTERM (`finish=error`, "shutdown requested"), so stopping a
busy engine cuts whatever answer is being streamed. Requests in flight are counted from what the engine
itself says where it can (the fork's `/metrics`: `ds4_requests_inflight` + `ds4_queue_depth`), otherwise
from the kernel: upstream serves one request per connection, so each established connection on its port
is a request in flight (or one queued behind it). At `server.drain_s` the stop goes ahead and says how many
it cut. A new engine cannot start beside the old one instead: 128 GB holds one 81 GB model.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit


from ds4_converge.facts.port import count_established

PROC_NET = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
POLL_S = 0.1  # a held request waits for the drain: it ends within a tenth of a second of the last answer


@dataclass(frozen=True)
class Drained:
    in_flight: int  # requests in flight when the drain began
    waited_s: float
    cut: int  # still in flight at the deadline: the stop cuts them
    deadline_s: float
    source: str  # "metrics" or "connections"

    def describe(self) -> str:
        if not self.in_flight:
            return "idle, nothing to drain"
        if self.cut:
            return (f"cut {self.cut} request(s) still in flight at the {self.deadline_s:g} s drain deadline "
                    f"(server.drain_s; {self.in_flight} in flight when the drain began)")
        return f"waited {self.waited_s:.1f} s for {self.in_flight} request(s) in flight to finish"


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {metric name: value} for the unlabelled samples."""
    found = {}
    for line in text.splitlines():
        if line.startswith("#") or "{" in line:
            continue
        name, _, value = line.strip().rpartition(" ")
        try:
            found[name] = float(value)
        except ValueError:
            continue
    return found


def from_metrics(endpoint: str) -> int | None:
    """Requests generating or queued, as the fork's /metrics says; None where there is no such metric."""
    import http.client

    from ds4_converge.core.engine_http import request

    try:
        status, text = request(endpoint, "GET", "/metrics", timeout=5)
    except (OSError, http.client.HTTPException):
        return None
    if status != 200:
        return None
    metrics = parse_metrics(text)
    if "ds4_requests_inflight" not in metrics:
        return None
    return int(metrics["ds4_requests_inflight"] + metrics.get("ds4_queue_depth", 0))


def from_connections(port: int) -> int:
    total = 0
    for path in PROC_NET:
        try:
            total += count_established(path.read_text(), port)
        except OSError:
            continue
    return total


def in_flight(endpoint: str) -> tuple[int, str]:
    # connections first: asking /metrics opens one more, which must not count itself
    connections = from_connections(urlsplit(endpoint).port or 80)
    counted = from_metrics(endpoint)
    if counted is not None:
        return counted, "metrics"
    return connections, "connections"


def wait_idle(endpoint: str, deadline_s: float, say=lambda _m: None, poll_s: float = POLL_S) -> Drained:
    """Wait until nothing is in flight at `endpoint`, for at most `deadline_s` (0: don't wait)."""
    started = time.monotonic()
    busy, source = in_flight(endpoint)
    first = busy
    if busy and deadline_s > 0:
        say(f"draining: {busy} request(s) in flight; waiting up to {deadline_s:g} s (server.drain_s) before the stop")
    while busy and time.monotonic() - started < deadline_s:
        time.sleep(min(poll_s, max(deadline_s - (time.monotonic() - started), 0)))
        busy, source = in_flight(endpoint)
    drained = Drained(first, time.monotonic() - started, busy, deadline_s, source)
    if first:
        say(drained.describe())
    return drained
