"""The front door: HAProxy, a program of the same supervisord, in front of the engine (spec `front`).

Clients reach front.host:front.port with `Authorization: Bearer KEY`. The engine listens on loopback in one of
two slots (server.port and server.port + 1): HAProxy's two servers, `balance first`, the idle slot in
maintenance. A new engine starts on the idle slot, where HAProxy sends nobody; the probe talks to it directly;
only once the switch commits does :func:`point_at` flip the two on HAProxy's admin socket (no reload). A revert
starts last good on the slot HAProxy already points at, so it never moves the front door. Requests that arrive
while no engine listens there are held (retried and redispatched for front.hold_s), then served.

The front door always points at last good's slot (:func:`live_port`); before a first install has a last good,
at the slot the first engine does not use, so that nobody reaches it before the probe passed.
"""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

from ds4_converge.core.context import Context
from ds4_converge.core.layout import Layout, write_atomic
from ds4_converge.core.state import Deployment
from ds4_converge.errors import Ds4Error

PROGRAM = "ds4c.front"  # a name server.name cannot take (it allows no '.')
ADMIN_TIMEOUT_S = 5
# OpenAI's shape, so that its clients show the reason
UNAUTHORIZED = {"error": {"message": "Incorrect or missing API key: send Authorization: Bearer KEY with a key "
                                     "of this endpoint.", "type": "invalid_request_error", "param": None,
                          "code": "invalid_api_key"}}


class FrontError(Ds4Error):
    pass


def enabled(ctx: Context) -> bool:
    return ctx.spec.front is not None


def slots(ctx: Context) -> tuple[int, int]:
    port = ctx.spec.server.port
    return port, port + 1


def port_of(deployment: Deployment | None) -> int | None:
    return urlsplit(deployment.endpoint).port if deployment is not None else None


def live_port(ctx: Context) -> int:
    """The slot the front door sends clients to: last good's; before there is one, the second slot (the first
    engine starts on the first, and nobody reaches it before the probe passed)."""
    a, b = slots(ctx)
    port = port_of(ctx.state.last_good)
    return port if port in (a, b) else b


def idle_port(ctx: Context) -> int:
    a, b = slots(ctx)
    return a if live_port(ctx) == b else b


# ------------------------------------------------------------------------------------------ files and argv


def directory(layout: Layout) -> Path:
    return layout.root / "front"


def config_path(layout: Layout) -> Path:
    return directory(layout) / "haproxy.cfg"


def admin_socket(layout: Layout) -> Path:
    return layout.run / "front.sock"  # run/ is 0700: the admin socket grants control of the front door


def unauthorized_path(layout: Layout) -> Path:
    return directory(layout) / "unauthorized.json"


def tls_path(layout: Layout) -> Path:
    """A link to front.tls.cert; HAProxy loads the key from the link beside it (`.key`): nothing is copied."""
    return directory(layout) / "tls.pem"


def haproxy_argv(layout: Layout, haproxy: str) -> list[str]:
    """Master-worker in the foreground: supervisord watches it, a changed config is a graceful reload (USR2)."""
    return [haproxy, "-W", "-db", "-f", str(config_path(layout))]


def _word(value: object) -> str:
    """A value in HAProxy's config, single-quoted (no escapes, no variables inside)."""
    text = str(value)
    if any(ch in text for ch in "'\n\r\x00"):
        raise FrontError(f"{text!r}: cannot be written into HAProxy's config (a quote or a newline)")
    return f"'{text}'"


def config(ctx: Context, *, active: int) -> str:
    """haproxy.cfg with `active` the slot in service."""
    from ds4_converge.service.render import Quoted, render_front

    front, layout = ctx.spec.front, ctx.layout
    a, b = slots(ctx)
    return render_front(dict(
        name=ctx.spec.server.name, public=f"{scheme(ctx)}://{front.host}:{front.port}",
        socket=Quoted(_word(admin_socket(layout))), hold_s=front.hold_s,
        bind=Quoted(_word(f"{front.host}:{front.port}")),
        tls=Quoted(_word(tls_path(layout))) if front.tls else "",
        keys=Quoted(_word(ctx.host_path(front.keys))), unauthorized=Quoted(_word(unauthorized_path(layout))),
        metrics=Quoted(_word(front.metrics)) if front.metrics else "", slot_a=a, slot_b=b, active=active),
        cache=ctx.renders)


def scheme(ctx: Context) -> str:
    return "https" if ctx.spec.front.tls else "http"


def public_url(ctx: Context) -> str:
    front = ctx.spec.front
    host = "127.0.0.1" if front.host == "0.0.0.0" else front.host
    return f"{scheme(ctx)}://{host}:{front.port}"


def write_files(ctx: Context, text: str) -> None:
    """The config, the 401 body, and the links to the certificate and its key."""
    layout = ctx.layout
    directory(layout).mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomic(unauthorized_path(layout), json.dumps(UNAUTHORIZED) + "\n")
    link = tls_path(layout)
    for path, target in ((link, "cert"), (link.with_name(link.name + ".key"), "key")):
        path.unlink(missing_ok=True)
        if ctx.spec.front.tls:
            os.symlink(ctx.host_path(getattr(ctx.spec.front.tls, target)), path)
    write_atomic(config_path(layout), text, mode=0o600)


# ------------------------------------------------------------------------------------------ the admin socket


def admin(layout: Layout, command: str) -> str:
    """One command on HAProxy's admin socket (bounded); its answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(ADMIN_TIMEOUT_S)
        sock.connect(str(admin_socket(layout)))
        sock.sendall(command.encode() + b"\n")
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def servers(layout: Layout, name: str) -> dict[str, dict]:
    """{"a": {"port", "up"}, "b": …} as HAProxy runs them now ("up": in service, the slot clients reach)."""
    found = {}
    for line in admin(layout, f"show servers state {name}-engine").splitlines():
        fields = line.split()
        if len(fields) > 18 and not line.startswith("#") and fields[3] in ("a", "b"):
            # srv_op_state 2: running; a server in maintenance is stopped (0)
            found[fields[3]] = {"port": int(fields[18]), "up": fields[5] == "2"}
    return found


def point_at(ctx: Context, port: int) -> None:
    """Clients go to `port` from now: the config says so for HAProxy's next start, and the running HAProxy is
    told on its admin socket: the new slot in service first, then the old one in maintenance (a request that
    meets the old one meanwhile is redispatched)."""
    write_files(ctx, config(ctx, active=port))
    if not running(ctx):
        return
    a, b = slots(ctx)
    new, old = ("a", "b") if port == a else ("b", "a")
    name = ctx.spec.server.name
    answer = admin(ctx.layout, f"set server {name}-engine/{new} state ready; "
                               f"set server {name}-engine/{old} state maint")
    if answer.strip():
        raise FrontError(f"HAProxy refused to flip the front door to port {port}: {answer.strip()[:300]}")


def running(ctx: Context) -> bool:
    supervisor = ctx.supervisor
    info = supervisor.info(PROGRAM) if supervisor.is_running() else None
    return bool(info and info["statename"] == "RUNNING")


def describe(ctx: Context) -> dict:
    """For `status`: where the front door is, where it points, whether it is up."""
    found = {"url": public_url(ctx), "points_at": None, "up": False,
             "metrics": f"http://{ctx.spec.front.metrics}/metrics" if ctx.spec.front.metrics else None}
    try:
        if not running(ctx):
            return found
        live = [s["port"] for s in servers(ctx.layout, ctx.spec.server.name).values() if s["up"]]
    except (OSError, Ds4Error):
        return found
    found.update(up=True, points_at=f"127.0.0.1:{live[0]}" if live else None)
    return found
