"""Who listens on a TCP port.

* :class:`SsListeners`: ``ss -Hltnp 'sport = :PORT'`` -> :class:`Listener` list. ``ss``
  only names processes it may see (other users' sockets need root): then ``pid`` is ``None``.
* :class:`ProcNetListeners`: fallback when ``ss`` is missing; reads ``/proc/net/tcp{,6}``
  and ``ls -l /proc/*/fd`` in one ``sh`` probe, parsed purely.
* :class:`ProcessInfo`: ``/proc/PID/comm`` and ``cmdline`` of a listener.
* :func:`blocks`: whether a listener's address keeps a server from binding its host on the same port.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Callable

from ds4_converge.facts.base import Fact, FactParseError, FactRunner, FrozenModel, Observation, observe

TCP_LISTEN = "0A"
TCP_ESTABLISHED = "01"


class Listener(FrozenModel):
    #: Local address as printed: ``127.0.0.1``, ``0.0.0.0``, ``::``, ``*``.
    address: str
    port: int
    pid: int | None = None
    #: Process name (``ss`` name or ``/proc/PID/comm``, at most 15 chars).
    command: str | None = None
    #: Full argv from ``/proc/PID/cmdline`` when readable.
    cmdline: list[str] | None = None


def blocks(listener_address: str, bind_host: str) -> bool:
    """Whether a socket listening on ``listener_address`` (as ss or /proc print it) keeps ``bind_host`` (an IPv4
    literal or ``localhost``, what ds4-server binds) from binding the same port.

    A wildcard collides with every address of its family: ``0.0.0.0`` with every IPv4 one, and ``*`` or ``::``
    (IPv6, dual-stack unless it is V6ONLY, which neither ss nor /proc says for ``::``) with every one; binding
    ``0.0.0.0`` collides with every IPv4 listener. Otherwise only the same address collides: 127.0.0.2:P does
    not keep 127.0.0.3:P from binding, and an IPv6-only address (``::1``) never blocks an IPv4 one.
    """
    host = "127.0.0.1" if bind_host == "localhost" else bind_host
    address = listener_address.strip("[]").split("%", 1)[0]
    if address in ("*", "::", "0.0.0.0"):
        return True
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return True  # not an address we can read: say it collides rather than miss a holder
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is None:
            return False
        ip = ip.ipv4_mapped
    return host == "0.0.0.0" or str(ip) == host


class ProcessDetails(FrozenModel):
    pid: int
    comm: str
    cmdline: list[str]


# ---- ss -------------------------------------------------------------------------------

_USER_RE = re.compile(r'\("((?:[^"\\]|\\.)*)",pid=(\d+),fd=\d+\)')


def _split_addr(local: str) -> tuple[str, int]:
    addr, sep, port = local.rpartition(":")
    if not sep or not port.isdigit():
        raise FactParseError(f"not an address:port: {local!r}")
    if addr.startswith("[") and addr.endswith("]"):
        addr = addr[1:-1]
    addr = addr.split("%", 1)[0]  # 127.0.0.1%lo (bound to an interface)
    return addr, int(port)


def parse_ss_listeners(stdout: str) -> list[Listener]:
    """``ss -Hltnp`` lines -> listeners; one per (socket, process), ``pid=None`` if hidden."""
    out: list[Listener] = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        fields = line.split()
        if fields[0] == "State":  # header, if -H was ignored
            continue
        if len(fields) < 5 or fields[0] != "LISTEN":
            raise FactParseError(f"not an ss listening-socket line: {line!r}")
        addr, port = _split_addr(fields[3])
        users = _USER_RE.findall(line)
        if not users:
            out.append(Listener(address=addr, port=port))
        for name, pid in users:
            out.append(Listener(address=addr, port=port, pid=int(pid), command=name))
    return out


@dataclass(frozen=True)
class SsListeners(Fact[list[Listener]]):
    port: int

    def command(self) -> list[str]:
        return ["ss", "-Hltnp", f"sport = :{self.port}"]

    def parse(self, stdout: str) -> list[Listener]:
        return [entry for entry in parse_ss_listeners(stdout) if entry.port == self.port]

    def default(self) -> list[Listener]:
        return []


# ---- /proc fallback ------------------------------------------------------------------

_PROC_SCRIPT = r"""
echo '== tcp'; cat /proc/net/tcp 2>/dev/null
echo '== tcp6'; cat /proc/net/tcp6 2>/dev/null
echo '== fd'; ls -l /proc/[0-9]*/fd/ 2>/dev/null
exit 0
"""


def _hex_addr(hexaddr: str) -> str:
    """Kernel little-endian-per-word hex -> printable address."""
    raw = bytes.fromhex(hexaddr)
    if len(raw) == 4:
        return ".".join(str(b) for b in raw[::-1])
    if len(raw) == 16:
        words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
        return str(ipaddress.IPv6Address(words))
    raise FactParseError(f"bad address {hexaddr!r}")


def _proc_net_rows(text: str):
    """``/proc/net/tcp`` or ``tcp6`` text -> (local address, local port, state, inode) per socket."""
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0] == "sl":
            continue
        if len(fields) < 10 or not fields[0].endswith(":"):
            raise FactParseError(f"not a /proc/net/tcp line: {line!r}")
        hexaddr, _, hexport = fields[1].partition(":")
        try:
            yield _hex_addr(hexaddr), int(hexport, 16), fields[3], int(fields[9])
        except ValueError as exc:
            raise FactParseError(f"bad /proc/net/tcp line: {line!r}") from exc


def parse_proc_net_tcp(text: str, port: int) -> dict[int, str]:
    """``/proc/net/tcp`` or ``tcp6`` text -> ``{inode: local address}`` of LISTEN sockets on ``port``."""
    return {inode: addr for addr, local_port, state, inode in _proc_net_rows(text)
            if state == TCP_LISTEN and local_port == port}


def count_established(text: str, port: int) -> int:
    """``/proc/net/tcp`` or ``tcp6`` text -> established connections served on ``port`` (the server's side of
    each: local port ``port``). ds4-server serves one request per connection, so each is a request in flight."""
    return sum(1 for _, local_port, state, _ in _proc_net_rows(text)
               if state == TCP_ESTABLISHED and local_port == port)


_FD_DIR_RE = re.compile(r"^/proc/(\d+)/fd/?:$")
_SOCKET_RE = re.compile(r"-> socket:\[(\d+)\]$")


def parse_ls_proc_fds(text: str) -> dict[int, list[int]]:
    """``ls -l /proc/*/fd/`` output -> ``{socket inode: [pids]}``."""
    out: dict[int, list[int]] = {}
    pid: int | None = None
    for line in text.splitlines():
        m = _FD_DIR_RE.match(line)
        if m:
            pid = int(m.group(1))
            continue
        s = _SOCKET_RE.search(line)
        if s and pid is not None:
            pids = out.setdefault(int(s.group(1)), [])
            if pid not in pids:
                pids.append(pid)
    return out


def _sections(stdout: str) -> dict[str, str]:
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in stdout.splitlines():
        if line.startswith("== "):
            current = sections.setdefault(line[3:].strip(), [])
        elif current is not None:
            current.append(line)
        elif line.strip():
            raise FactParseError(f"output before the first section: {line!r}")
    return {k: "\n".join(v) for k, v in sections.items()}


def parse_proc_listeners(stdout: str, port: int) -> list[Listener]:
    """The fallback probe's sectioned output -> listeners on ``port`` (``command`` unknown)."""
    sec = _sections(stdout)
    if "tcp" not in sec or "fd" not in sec:
        raise FactParseError("fallback probe output lacks the tcp or fd section")
    sockets = parse_proc_net_tcp(sec["tcp"], port)
    sockets.update(parse_proc_net_tcp(sec.get("tcp6", ""), port))
    owners = parse_ls_proc_fds(sec["fd"])
    out: list[Listener] = []
    for inode, addr in sockets.items():
        pids = owners.get(inode) or [None]
        out.extend(Listener(address=addr, port=port, pid=pid) for pid in pids)
    return out


@dataclass(frozen=True)
class ProcNetListeners(Fact[list[Listener]]):
    port: int

    def command(self) -> list[str]:
        return ["sh", "-c", _PROC_SCRIPT]

    def parse(self, stdout: str) -> list[Listener]:
        return parse_proc_listeners(stdout, self.port)

    def default(self) -> list[Listener]:
        return []


# ---- process details -----------------------------------------------------------------


def parse_comm_cmdline(stdout: str, pid: int) -> ProcessDetails:
    """``cat /proc/PID/comm /proc/PID/cmdline`` -> name and argv (NUL-separated)."""
    comm, sep, cmdline = stdout.partition("\n")
    if not sep or not comm:
        raise FactParseError("no comm line")
    args = cmdline.split("\0")
    if args and args[-1] == "":
        args.pop()
    return ProcessDetails(pid=pid, comm=comm, cmdline=args)


@dataclass(frozen=True)
class ProcessInfo(Fact[ProcessDetails | None]):
    pid: int

    def command(self) -> list[str]:
        return ["cat", f"/proc/{self.pid}/comm", f"/proc/{self.pid}/cmdline"]

    def parse(self, stdout: str) -> ProcessDetails:
        return parse_comm_cmdline(stdout, self.pid)


# ---- composed -------------------------------------------------------------------------


def port_holders(port: int, runner: FactRunner | None = None, *,
                 run: Callable[[Fact], Observation] | None = None) -> list[Listener]:
    """Who listens on ``port``: ``ss`` (or the ``/proc`` fallback when ``ss`` is missing),
    each listener completed with ``/proc/PID/comm`` and ``cmdline``.

    ``pid`` is ``None`` for a socket whose process this user may not see.
    ``run`` lets :func:`~.host.gather_host_facts` record the probes; default: :func:`observe`.
    """
    run = run or (lambda fact: observe(fact, runner))
    ss = run(SsListeners(port=port))
    listeners = ss.value
    if ss.probe.status == "missing":
        listeners = run(ProcNetListeners(port=port)).value
    pids = dict.fromkeys(entry.pid for entry in listeners if entry.pid is not None)
    details = {pid: run(ProcessInfo(pid=pid)).value for pid in pids}
    return [_enrich(entry, details.get(entry.pid)) for entry in listeners]


def _enrich(entry: Listener, details: ProcessDetails | None) -> Listener:
    if details is None:
        return entry
    return entry.model_copy(update={"command": entry.command or details.comm, "cmdline": details.cmdline})
