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
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ds4_converge.core.context import Context
from ds4_converge.core.layout import Layout, write_atomic
from ds4_converge.core.state import Deployment
from ds4_converge.errors import Ds4Error
from ds4_converge.facts import programs
from ds4_converge.service import snapshot
from ds4_converge.service.snapshot import Snapshot
# HAProxy's runtime API, for this module's readers too (front.admin, front.servers, front.AdminTimeout …)
from ds4_converge.service.haproxy import (ADMIN_TIMEOUT_S, HOLD, PROGRAM, SERVERS, AdminTimeout,  # noqa: F401
                                          FrontError, admin, admin_socket, servers)

RELOAD_BOUND_S = 20  # HAProxy says "Loading success." or "Loading failure!" within a second or two of USR2
# OpenAI's shape, so that its clients show the reason
UNAUTHORIZED = {"error": {"message": "Incorrect or missing API key: send Authorization: Bearer KEY with a key "
                                     "of this endpoint.", "type": "invalid_request_error", "param": None,
                          "code": "invalid_api_key"}}


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
    return layout.front_config.parent


def config_path(layout: Layout) -> Path:
    return layout.front_config


def unauthorized_path(layout: Layout) -> Path:
    return directory(layout) / "unauthorized.json"


def tls_path(layout: Layout) -> Path:
    """A link to front.tls.cert; HAProxy loads the key from the link beside it (`.key`): nothing is copied."""
    return directory(layout) / "tls.pem"


def executable() -> str:
    """The haproxy the front door runs (facts.programs: PATH, then where Debian and Ubuntu install it)."""
    return programs.haproxy() or "haproxy"


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


def write_files(ctx: Context, text: str, candidate: Deployment | None = None) -> None:
    """The config, the 401 body, and the links to the certificate and its key; and for Prometheus, the release
    each slot serves from now and front.hold_s (whenever the config is written: the front door moves, or its
    settings change)."""
    layout = ctx.layout
    directory(layout).mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomic(unauthorized_path(layout), json.dumps(UNAUTHORIZED) + "\n")
    link = tls_path(layout)
    for path, target in ((link, "cert"), (link.with_name(link.name + ".key"), "key")):
        path.unlink(missing_ok=True)
        if ctx.spec.front.tls:
            os.symlink(ctx.host_path(getattr(ctx.spec.front.tls, target)), path)
    write_atomic(config_path(layout), text, mode=0o600)
    write_textfile(ctx, candidate)


@dataclass(frozen=True)
class Files:
    """What write_files changes, as it was: the config's text and where the certificate links pointed."""

    config: str | None
    links: dict[Path, str | None]


def saved_files(layout: Layout) -> Files:
    link = tls_path(layout)
    links = {}
    for path in (link, link.with_name(link.name + ".key")):
        try:
            links[path] = os.readlink(path)
        except OSError:
            links[path] = None
    try:
        config_text = config_path(layout).read_text()
    except OSError:
        config_text = None
    return Files(config_text, links)


def restore_files(layout: Layout, files: Files) -> None:
    for path, target in files.links.items():
        path.unlink(missing_ok=True)
        if target is not None:
            os.symlink(target, path)
    if files.config is not None:
        write_atomic(config_path(layout), files.config, mode=0o600)


def reload(layout: Layout, supervisor, haproxy: str) -> None:
    """The running HAProxy loads its config anew (USR2: in-flight requests finish on the old worker). HAProxy
    checks the config first (`-c`); then the master's own words in its log tell whether the new worker took over:
    after "Loading failure!" (an address it cannot bind, say) the old worker goes on serving the old config, and
    the caller puts the old files back. Raises FrontError naming what HAProxy said."""
    try:
        check = subprocess.run([haproxy, "-c", "-q", "-f", str(config_path(layout))], capture_output=True,
                               text=True, errors="replace", timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FrontError(f"cannot check HAProxy's new config: {exc}") from None
    if check.returncode != 0:
        said = _alerts(check.stdout + check.stderr) or f"haproxy -c exited {check.returncode}"
        raise FrontError(f"HAProxy refuses the new config ({said})")
    log = layout.logs / "front.log"
    offset = _size(log)
    supervisor.signal(PROGRAM, "USR2")
    deadline = time.monotonic() + RELOAD_BOUND_S
    while time.monotonic() < deadline:
        said = _read_from(log, offset)
        if "Loading success." in said:
            return
        if "Loading failure!" in said:
            raise FrontError(f"HAProxy's reload failed, its old worker serves on ({_alerts(said) or log})")
        time.sleep(0.1)
    raise FrontError(f"HAProxy did not say within {RELOAD_BOUND_S} s whether its reload succeeded ({log})")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_from(path: Path, offset: int) -> str:
    """What the log gained since `offset` (from its start when it was rotated meanwhile)."""
    try:
        with open(path, "rb") as handle:
            if os.fstat(handle.fileno()).st_size >= offset:
                handle.seek(offset)
            return handle.read(1 << 20).decode(errors="replace")
    except OSError:
        return ""


def _alerts(text: str) -> str:
    """HAProxy's [ALERT] lines, without their prefix: what it could not do."""
    lines = [line.split(":", 1)[1].strip() if ":" in line else line.strip()
             for line in text.splitlines() if "[ALERT]" in line]
    return "; ".join(lines)[:600]


# ------------------------------------------------------------------------------------------ the admin socket


def not_answering(ctx: Context, exc: AdminTimeout) -> FrontError:
    """The error for a HAProxy that exists but does not answer, with its pid (supervisord's word for it)."""
    return FrontError(f"HAProxy does not answer ({_pid_words(ctx)}, stopped?): {exc}")


def _pid_words(ctx: Context) -> str:
    try:
        info = ctx.supervisor.info(PROGRAM)
    except (OSError, Ds4Error):
        info = None
    return f"pid {info['pid']}" if info and info.get("pid") else "pid unknown"


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
    except AdminTimeout as exc:
        ctx.say(f"front door: could not hold new requests ({not_answering(ctx, exc)}); they reach the engine "
                f"until it stops")
        return False
    except (OSError, FrontError) as exc:
        ctx.say(f"front door: could not hold new requests ({exc}); they reach the engine until it stops")
        return False
    return True


def point_at(ctx: Context, port: int, candidate: Deployment | None = None) -> None:
    """Clients go to `port` from now: the config says so for HAProxy's next start, and the running HAProxy is
    told on its admin socket. `candidate`: a new engine started beside the serving one (it has a slot too)."""
    write_files(ctx, config(ctx, active=port), candidate)
    if running(ctx):
        try:
            serve_port(ctx.layout, ctx.spec.server.name, port)
        except AdminTimeout as exc:
            raise not_answering(ctx, exc) from None


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


def unsupervised_pid(ctx: Context) -> int | None:
    """The master of this root's HAProxy when it runs without its supervisord (killed), else None."""
    from ds4_converge.core import processes

    found = ctx.supervisor.front_leftovers()
    masters = [pid for pid in found if (process := processes.read(pid)) is not None and process.ppid not in found]
    return min(masters or found, default=None)


def describe(ctx: Context, now: Snapshot | None = None) -> dict:
    """For `status`: where the front door is, where it points, whether it is up, which release each slot serves.
    `now`: what serves, as service/snapshot.py read it with the front door (else it is read here)."""
    found = {"url": public_url(ctx), "points_at": None, "up": False,
             "metrics": f"http://{ctx.spec.front.metrics}/metrics" if ctx.spec.front.metrics else None,
             "problem": None, "slots": slot_map(ctx)}
    now = now or snapshot.read(ctx.layout, ctx.supervisor, ctx.spec, ctx.state)
    if now.unknown is not None:
        return {**found, "problem": f"HAProxy's admin socket: {now.error or now.unknown}"}
    if not now.front.runs:
        # supervisord killed: its HAProxy serves on, unsupervised, until the next run replaces it
        try:
            orphan = unsupervised_pid(ctx)
        except (OSError, Ds4Error) as exc:
            return {**found, "problem": f"HAProxy's admin socket: {exc}"}
        if orphan is None:
            return {**found, "problem": "HAProxy does not run"}
        found["unsupervised_pid"] = orphan
    if now.front_servers is None:
        return {**found, "problem": now.front_problem}
    found.update(up=True, points_at=f"127.0.0.1:{now.points_at}" if now.points_at else None)
    return found


# ------------------------------------------------------------------------------------------ releases per slot
# HAProxy's exporter names a slot's series after its server (proxy="NAME-engine", server="a"), whatever release
# it serves: renaming servers would need a reload. The map from slot to release is a series of its own instead,
# written whenever the front door moves (the only moments clients start reaching another release) or its config
# changes, which a query joins on (proxy, server) to count requests, errors, latency and bytes per release
# (docs/observability.md).

TEXTFILE = "ds4_converge_front.prom"  # under ROOT/metrics, beside the fleet's textfile (cli/fleet_facts.py)


def slot_map(ctx: Context, candidate: Deployment | None = None) -> list[dict]:
    """[{"server": "a", "port", "release"}, …]: the release each slot serves, or served last (an idle slot keeps
    its last release, so that its counters, which no longer move, stay its release's). What listens on a slot
    is `candidate` (started beside the serving engine), else the deployment that runs; an idle slot keeps the
    release the map last written gave it, else the newest good one that ran there; None where none ever did."""
    state = ctx.state
    listening = [candidate] if candidate is not None else []
    listening += [state.current] if state.current is not None else []
    before = _written_map(ctx.layout)
    slots_map = []
    for server, port in zip(("a", "b"), slots(ctx)):
        found = next((d.release for d in listening if port_of(d) == port), None) or before.get((server, port)) \
            or next((d.release for d in reversed(state.good) if port_of(d) == port), None)
        slots_map.append({"server": server, "port": port, "release": found})
    return slots_map


def _map_path(layout: Layout) -> Path:
    return directory(layout) / "slots.json"


def _written_map(layout: Layout) -> dict:
    """{(server, port): release} as the front door last moved (a damaged or missing file: nothing)."""
    try:
        written = json.loads(_map_path(layout).read_text())
        return {(slot["server"], slot["port"]): slot["release"] for slot in written if isinstance(slot["release"], str)}
    except (OSError, ValueError, TypeError, KeyError):
        return {}


def metrics_text(ctx: Context, candidate: Deployment | None = None) -> str:
    from ds4_converge.core.textfile import render

    labels = {"root": str(ctx.layout.root), "proxy": f"{ctx.spec.server.name}-engine"}
    return render([
        ("ds4_converge_front_slot_info", "The release each engine slot of the front door serves (always 1): join "
         "HAProxy's server series on (proxy, server) to count them per release.",
         [({**labels, "server": slot["server"], "port": slot["port"], "release": slot["release"]}, 1)
          for slot in slot_map(ctx, candidate) if slot["release"]]),
        ("ds4_converge_front_hold_seconds", "front.hold_s: how long the front door holds a request while no "
         "engine serves.", [(labels, ctx.spec.front.hold_s)]),
    ])


def forget_textfile(layout: Layout) -> None:
    (layout.root / "metrics" / TEXTFILE).unlink(missing_ok=True)
    _map_path(layout).unlink(missing_ok=True)


def write_textfile(ctx: Context, candidate: Deployment | None = None) -> None:
    """The map as the front door moves: kept (front/slots.json) and written for the node exporter. Best effort:
    metrics never fail a switch (a full disk, say); the next move writes them again."""
    try:
        write_atomic(_map_path(ctx.layout), json.dumps(slot_map(ctx, candidate)) + "\n")
        write_atomic(ctx.layout.root / "metrics" / TEXTFILE, metrics_text(ctx, candidate))
    except OSError as exc:
        ctx.say(f"warning: the front door's release map for Prometheus was not written ({exc})")
