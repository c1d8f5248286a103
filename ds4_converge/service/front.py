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
from dataclasses import dataclass
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
        hold=Quoted(_word(f"{HOLD_ADDRESS}:{a}")),
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
    """{"a": {"port", "up"}, "b": …, "hold": …} as HAProxy runs them now ("up": in service)."""
    found = {}
    for line in admin(layout, f"show servers state {name}-engine").splitlines():
        fields = line.split()
        if len(fields) > 18 and not line.startswith("#") and fields[3] in SERVERS:
            # srv_op_state 2: running; a server in maintenance is stopped (0)
            found[fields[3]] = {"port": int(fields[18]), "up": fields[5] == "2"}
    return found


@dataclass(frozen=True)
class Counters:
    """What HAProxy counted for a server (or the whole backend) since it started: clients' requests."""

    in_flight: int  # scur: sessions open now
    total: int  # stot: sessions ever
    answered: int  # hrsp_2xx: answers with a 2xx status


def counters(layout: Layout, name: str) -> dict[str, Counters]:
    """{"BACKEND": …, "a": …, "b": …, "hold": …} from `show stat` of the engine backend (empty: no such backend)."""
    import csv

    text = admin(layout, f"show stat {name}-engine -1 -1")
    rows = list(csv.reader(line for line in text.splitlines() if line.strip()))
    if not rows or not rows[0] or not rows[0][0].startswith("#"):
        return {}
    header = [field.strip("# ") for field in rows[0]]
    found = {}
    for row in rows[1:]:
        fields = dict(zip(header, row))
        try:
            found[fields["svname"]] = Counters(int(fields.get("scur") or 0), int(fields.get("stot") or 0),
                                               int(fields.get("hrsp_2xx") or 0))
        except (KeyError, ValueError):
            continue
    return found


def slot_counters(layout: Layout, name: str, port: int) -> Counters | None:
    """The counters of the engine slot on `port`; None when HAProxy has none there."""
    slot = next((server for server, found in servers(layout, name).items()
                 if server != HOLD and found["port"] == port), None)
    return counters(layout, name).get(slot) if slot else None


def traffic(ctx: Context, port: int | None):
    """For a bench of the engine on `port`: a function saying (clients' requests in flight there, ever), from
    HAProxy's stats, None when it cannot tell; None without a front door (nobody can tell then)."""
    if port is None or not enabled(ctx) or not admin_socket(ctx.layout).exists():
        return None
    layout, name = ctx.layout, ctx.spec.server.name

    def count() -> tuple[int, int] | None:
        try:
            found = slot_counters(layout, name, port)
        except (OSError, FrontError):
            return None
        return (found.in_flight, found.total) if found else None

    return count


SERVERS = ("a", "b", HOLD := "hold")
# The hold server: the first slot's port on another loopback address, where nothing can listen (the engine binds
# 127.0.0.1 only, and anyone else on that port, 0.0.0.0 included, is refused by preflight): every connection is
# refused, and HAProxy retries it after its turn-around time (a unix socket that does not exist fails at once instead, and
# the retries would be spent in a millisecond).
HOLD_ADDRESS = "127.0.0.2"


def _serve(layout: Layout, name: str, server: str) -> None:
    """`server` in service first, then every other one in maintenance: a request that meets one of those
    meanwhile is redispatched on its next retry."""
    commands = [f"set server {name}-engine/{server} state ready"]
    commands += [f"set server {name}-engine/{other} state maint" for other in SERVERS if other != server]
    answer = admin(layout, "; ".join(commands))
    if answer.strip():
        raise FrontError(f"HAProxy refused to send clients to {server}: {answer.strip()[:300]}")


def serve_port(layout: Layout, name: str, port: int) -> None:
    """The running HAProxy sends clients to the slot on `port` (the admin socket; no reload)."""
    slot = next((server for server, found in servers(layout, name).items()
                 if server != HOLD and found["port"] == port), None)
    if slot is None:
        raise FrontError(f"HAProxy has no engine slot on port {port}")
    _serve(layout, name, slot)


def hold(ctx: Context) -> bool:
    """Before the engine that serves is drained and stopped: new requests go to the hold server, where nothing
    ever listens, and are held there (retried, redispatched) until the switch commits or reverts and sends
    them to an engine. Without it, a request that arrives between the end of the drain and the stop would be
    cut by the stop. Returns False when no front door runs (nothing to hold)."""
    if not enabled(ctx) or not admin_socket(ctx.layout).exists():
        return False
    try:
        _serve(ctx.layout, ctx.spec.server.name, HOLD)
    except (OSError, FrontError) as exc:
        ctx.say(f"front door: could not hold new requests ({exc}); they reach the engine until it stops")
        return False
    return True


def point_at(ctx: Context, port: int) -> None:
    """Clients go to `port` from now: the config says so for HAProxy's next start, and the running HAProxy is
    told on its admin socket."""
    write_files(ctx, config(ctx, active=port))
    if running(ctx):
        serve_port(ctx.layout, ctx.spec.server.name, port)


def serve_restored(layout: Layout, name: str, deployment: Deployment) -> str:
    """For the switch guard, which restored `deployment` after a run died mid-switch: a front door that holds
    requests sends them to it (its config already points there). Best effort: '' when there is none."""
    port = port_of(deployment)
    if port is None or not admin_socket(layout).exists():
        return ""
    try:
        serve_port(layout, name, port)
    except (OSError, FrontError) as exc:
        return f"; the front door could not be pointed at it ({exc}): the next run does"
    return f"; the front door sends clients to port {port}"


def running(ctx: Context) -> bool:
    """HAProxy runs (or was just started again by supervisord: STARTING until its startsecs passed)."""
    supervisor = ctx.supervisor
    info = supervisor.info(PROGRAM) if supervisor.is_running() else None
    return bool(info and info["statename"] in ("RUNNING", "STARTING"))


def describe(ctx: Context) -> dict:
    """For `status`: where the front door is, where it points, whether it is up."""
    found = {"url": public_url(ctx), "points_at": None, "up": False,
             "metrics": f"http://{ctx.spec.front.metrics}/metrics" if ctx.spec.front.metrics else None}
    try:
        if not running(ctx):
            return found
        live = [srv["port"] for server, srv in servers(ctx.layout, ctx.spec.server.name).items()
                if srv["up"] and server != HOLD]
    except (OSError, Ds4Error):
        return found
    found.update(up=True, points_at=f"127.0.0.1:{live[0]}" if live else None)
    return found
