"""HAProxy's runtime API on the front door's admin socket (service/front.py is the front door itself): one
command and its answer, bounded; the servers of the engine backend as HAProxy runs them now. Below front.py, so
that the one reader of what serves (service/snapshot.py) reads the front door's slot without the front door's
module, which reads the snapshot."""
from __future__ import annotations

import socket
import time
from pathlib import Path

from ds4_converge.core.layout import Layout
from ds4_converge.errors import Ds4Error

PROGRAM = "ds4c.front"  # HAProxy's supervisord program: a name server.name cannot take (it allows no '.')
ADMIN_TIMEOUT_S = 5
SERVERS = ("a", "b", HOLD := "hold")  # the engine's two slots and the hold server (service/front.py)


class FrontError(Ds4Error):
    pass


class AdminTimeout(FrontError):
    """HAProxy's admin socket accepted the connection and said nothing within the bound: a HAProxy that is
    stopped (SIGSTOP) or hung; its process still exists."""


def admin_socket(layout: Layout) -> Path:
    return layout.run / "front.sock"  # run/ is 0700: the admin socket grants control of the front door


def admin(layout: Layout, command: str) -> str:
    """One command on HAProxy's admin socket, its answer; the whole exchange is bounded by ADMIN_TIMEOUT_S."""
    path = admin_socket(layout)
    deadline = time.monotonic() + ADMIN_TIMEOUT_S
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(ADMIN_TIMEOUT_S)
            sock.connect(str(path))
            sock.sendall(command.encode() + b"\n")
            chunks = []
            while True:
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                if not (chunk := sock.recv(65536)):
                    break
                chunks.append(chunk)
    except TimeoutError:
        raise AdminTimeout(f"its admin socket {path} did not answer within {ADMIN_TIMEOUT_S} s") from None
    return b"".join(chunks).decode(errors="replace")


def servers(layout: Layout, name: str) -> dict[str, dict]:
    """{"a": {"port", "up"}, "b": …, "hold": …} as HAProxy runs them now ("up": in service)."""
    found = {}
    for line in admin(layout, f"show servers state {name}-engine").splitlines():
        fields = line.split()
        if len(fields) > 18 and not line.startswith("#") and fields[3] in SERVERS:
            # srv_op_state 2: running; a server in maintenance is stopped (0)
            found[fields[3]] = {"port": int(fields[18]), "up": fields[5] == "2"}
    return found
