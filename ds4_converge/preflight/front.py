"""The front door's own traps, checked before anything changes: HAProxy installed, the key file private, the
certificate there, the public and metrics ports free (or ours)."""
from __future__ import annotations

import os
import stat

from ds4_converge.core import bounded_file
from ds4_converge.core.context import Context
from ds4_converge.core.plan import Finding
from ds4_converge.spec.model import MAX_KEYS_BYTES, MAX_PEM_BYTES
from ds4_converge.facts import programs
from ds4_converge.preflight.rules import held_by

PACKAGE = "haproxy"  # Debian and Ubuntu's package, which has the Prometheus exporter built in


def findings(ctx: Context) -> list[Finding]:
    front = ctx.spec.front
    if front is None:
        return []
    out: list[Finding] = []
    if programs.haproxy() is None:
        out.append(Finding("error", f"front: haproxy is not installed (the front door is HAProxy; looked on "
                                    f"{programs.haproxy_looked_in()})",
                           fix=f"apt-get install {PACKAGE}"))
    out += _key_file(ctx)
    if front.tls:
        for field in ("cert", "key"):
            path = ctx.host_path(getattr(front.tls, field))
            try:
                bounded_file.check(path, MAX_PEM_BYTES, "a PEM file")
            except bounded_file.FileRefused as exc:
                out.append(Finding("error", f"front.tls.{field}: {path} is {exc}"))
            except OSError as exc:
                out.append(Finding("error", f"front.tls.{field}: {path}: {exc.strerror or exc}"))
    ports = [("front.port", front.host, front.port)]
    if front.metrics:
        ports.append(("front.metrics.port", front.metrics.host, front.metrics.port))
    for field, host, port in ports:
        out += _held(ctx, field, host, port)
    return out


def _key_file(ctx: Context) -> list[Finding]:
    path = ctx.host_path(ctx.spec.front.keys)
    try:
        st = os.stat(path)
    except OSError as exc:
        return [Finding("error", f"front.keys: {path}: {exc.strerror}",
                        fix=f"write one API key per line into {path}, then chmod 600 {path}")]
    if st.st_mode & 0o077 and stat.S_ISREG(st.st_mode):
        return [Finding("error", f"front.keys: {path} is readable by others (mode {stat.S_IMODE(st.st_mode):04o}): "
                                 f"API keys must be private", fix=f"chmod 600 {path}")]
    try:
        text = bounded_file.read(path, MAX_KEYS_BYTES, "a key file").decode(errors="replace")
    except bounded_file.FileRefused as exc:
        return [Finding("error", f"front.keys: {path} is {exc}")]
    except OSError as exc:
        return [Finding("error", f"front.keys: {path}: {exc.strerror}")]
    if not any(line.strip() and not line.lstrip().startswith("#") for line in text.splitlines()):
        return [Finding("error", f"front.keys: {path} holds no key (one per line)")]
    return []


def _held(ctx: Context, field: str, host: str, port: int) -> list[Finding]:
    """A port held on `host`'s address (the same address, or a wildcard: another loopback address is no collision,
    the rule of server.host) by anyone but our own supervisord's programs (the front door of an earlier run)."""
    from ds4_converge.facts.port import blocks, port_holders

    listeners = [l for l in port_holders(port) if blocks(l.address, host)]
    ours = ctx.supervisor.owns(l.pid for l in listeners if l.pid) if listeners else set()
    return [Finding("error", f"{field}: port {port} is held by {held_by(l, field)[0]}", fix=held_by(l, field)[1])
            if l.pid else
            Finding("error", f"{field}: port {port} is held by a process this user cannot see, which ds4-converge "
                             f"does not manage", fix=f"stop it or choose another {field}")
            for l in listeners if l.pid is None or l.pid not in ours]
