"""One plain-HTTP request to the engine on this host, for the probe and the drain.

http.client and not requests: a no-op run probes the engine, and requests' import time would be most of it;
the engine speaks plain HTTP/1.1 on loopback or a LAN address, so nothing of requests is missed here.
"""
from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit


def request(endpoint: str, method: str, path: str, timeout: float, body: dict | None = None) -> tuple[int, str]:
    """(status, text). Raises OSError (refused, timed out) or http.client.HTTPException."""
    url = urlsplit(endpoint)
    connection = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=timeout)
    try:
        payload = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    finally:
        connection.close()
