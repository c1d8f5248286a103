"""`ds4-converge facts` and `ds4-converge init`: what this host is, and a starter spec that suits it.

Both read the host through :func:`~ds4_converge.facts.gather_host_facts` only; the starter spec itself is
written by the pure :func:`ds4_converge.preflight.starter.starter_spec` (facts in, YAML text out).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ds4_converge.cli.command import FAILED, INVALID, OK, CliError, Command
from ds4_converge.cli.values import number
from ds4_converge.units import gib

if TYPE_CHECKING:
    from rich.table import Table

    from ds4_converge.facts import HostFacts



# ------------------------------------------------------------------------------------------------ facts


def _port_argument(parser) -> None:
    parser.add_argument("--port", type=number(int, 1, 65535), default=8000,
                        help="the port the engine is meant to serve on: who holds it now (default 8000)")


def _facts_arguments(parser) -> None:
    parser.add_argument("spec", nargs="?", metavar="SPEC",
                        help="gather what this spec needs looked at (its port, paths.root, model folders, service "
                             "user, and which port holders its supervisord runs): the facts that `SPEC --check "
                             "--facts FILE` plans against on another host")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a spec value (with SPEC)")
    _port_argument(parser)


def facts(args, session) -> int:
    import socket
    import time

    from ds4_converge.cli import report
    from ds4_converge.facts import gather_host_facts

    if args.spec is None:
        host = gather_host_facts(port=args.port)
    else:
        from ds4_converge.orchestrate.reconciler import facts_request

        ctx = session.context()
        host = gather_host_facts(**facts_request(ctx))
        holders = {listener.pid for listener in host.listeners if listener.pid}
        from ds4_converge.orchestrate.captured_facts import returned_by

        ours = sorted(ctx.supervisor.owns(holders)) if holders else []
        host = host.model_copy(update={"supervised_pids": ours, "supervised_returned_bytes": returned_by(host, ours)})
    if session.json:
        captured = {"hostname": socket.gethostname(), "captured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    **({"spec": args.spec} if args.spec else {})}
        session.emit(report.document("facts", ok=True, exit_code=OK, facts=json.loads(host.to_json()), **captured))
        return OK
    session.out.print(facts_table(host))
    return OK



def facts_table(host: HostFacts) -> Table:
    from rich.markup import escape
    from rich.table import Table

    from ds4_converge.preflight.rules import sm_arch

    table = Table(title="host facts", show_header=False, box=None, title_justify="left")
    table.add_column("fact", style="bold")
    table.add_column("value")

    def row(name: str, value: str) -> None:
        table.add_row(name, escape(value))

    row("arch", host.arch or "unknown")
    if host.gpus:
        for gpu in host.gpus:
            cc = gpu.compute_cap
            arch = f", {sm_arch(cc)}" if cc else ""
            row(f"gpu {gpu.index}", f"{gpu.name} (compute capability {cc or 'unknown'}{arch}), "
                                    f"driver {gpu.driver_version or 'unknown'}")
    else:
        row("gpu", f"none ({host.status('gpu.NvidiaGpus') or 'not probed'})")
    row("driver CUDA", str(host.driver.cuda_version or "unknown"))
    for nvcc in host.cuda.nvccs:
        where = f"PATH #{nvcc.path_index + 1}" if nvcc.path_index is not None else "toolkit only"
        also = f" (also {', '.join(nvcc.aliases)})" if nvcc.aliases else ""
        row("nvcc", f"{nvcc.path} {nvcc.version or 'version unknown'} [{where}]{also}")
    if not host.cuda.nvccs:
        row("nvcc", "none found")
    for tk in host.cuda.toolkits:
        compat = f", compat {tk.compat_dir} (libcuda {tk.compat_driver or '?'})" if tk.compat_dir else ""
        row("toolkit", f"{tk.path} nvcc {tk.version or 'unknown'}{compat}")
    link = host.cuda.link
    if link is not None:
        row(link.path, f"-> {link.resolved or link.target or '?'}" if link.is_symlink
            else ("a directory" if link.exists else "missing"))
    for key in ("CUDA_HOME", "NVCC", "CUDA_ARCH", "LD_LIBRARY_PATH"):
        if key in host.build_env:
            row(f"env {key}", host.build_env[key])
    if host.memory:
        row("memory", f"{gib(host.memory.total_bytes)} total, {gib(host.memory.available_bytes)} available")
    else:
        row("memory", "unknown")
    for label, space in [(f"disk {host.root}", host.disk_root), *((f"disk {d}", s) for d, s in host.disk_models.items())]:
        if space is not None:
            at = "" if space.exists else f" (at {space.measured_at})"
            row(label, f"{gib(space.available_bytes)} free of {gib(space.total_bytes)} on {space.mount}{at}")
    if host.listeners:
        for listener in host.listeners:
            who = f"pid {listener.pid} ({listener.command or '?'})" if listener.pid else "a process this user cannot see"
            row(f"port {host.port}", f"{listener.address}: {who}")
    else:
        row(f"port {host.port}", "free")
    row("service user", f"{host.service_user or 'unknown'} (home {host.service_home or 'unknown'})")
    for key, probe in host.probes.items():
        if probe.status != "ok":
            row("probe", f"{key}: {probe.status}" + (f" ({probe.detail})" if probe.detail else ""))
    return table


# ------------------------------------------------------------------------------------------------- init


def _write_new(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` only if it does not exist yet (atomic link; never overwrites)."""
    import tempfile

    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.link(tmp, path)
    finally:
        os.unlink(tmp)


def _init_arguments(parser) -> None:
    parser.add_argument("--out", type=Path, default=Path("spec.yaml"), metavar="FILE",
                        help="where to write the starter spec (default spec.yaml; never overwritten)")
    _port_argument(parser)


def init(args, session) -> int:
    import tempfile
    from dataclasses import asdict

    from ds4_converge.cli import report
    from ds4_converge.preflight.starter import starter_spec
    from ds4_converge.facts import gather_host_facts
    from ds4_converge.spec.loader import SpecInvalid, load_spec

    path: Path = args.out
    if path.exists() or path.is_symlink():
        raise CliError(INVALID, "usage", f"{path} exists: not overwriting it (choose another --out, or remove it)")
    host = gather_host_facts(port=args.port)
    starter = starter_spec(host, port=args.port, as_root=os.geteuid() == 0)
    with tempfile.TemporaryDirectory() as scratch:
        probe = Path(scratch) / path.name
        probe.write_text(starter.text)
        try:
            load_spec(probe)
        except SpecInvalid as exc:  # a bug in the template: say so, write nothing
            raise CliError(FAILED, "internal", "internal error: the starter spec is invalid",
                           lines=exc.problems) from None
    try:
        _write_new(path, starter.text)
    except FileExistsError:
        raise CliError(INVALID, "usage", f"{path} exists: not overwriting it") from None
    except OSError as exc:
        raise CliError(FAILED, "failed", f"cannot write {path}: {exc}") from None
    if session.json:
        fields = {k: v for k, v in asdict(starter).items() if k != "text"}
        session.emit(report.document("init", ok=True, exit_code=OK, out=str(path), **fields))
        return OK
    session.say(f"wrote {path}: target {starter.target}" + (f" ({starter.cuda_arch})" if starter.cuda_arch else "")
                + f", model {starter.model}, ctx {starter.ctx}")
    for note in starter.notes:
        session.say(f"  - {note}")
    from ds4_converge.tool_command import tool_command

    session.say(f"next: {tool_command()} {path} --check")
    return OK


COMMANDS = [
    Command("facts", "the host facts preflight reads (GPU, driver, every nvcc, memory, disk, port holders)", facts,
            add_arguments=_facts_arguments, takes_spec=False,
            description="The host facts preflight reads. With SPEC, what that spec needs looked at; with --json, "
                        "a document another host plans against: `ds4-converge SPEC --check --facts FILE`.",
            epilog="exit codes:\n    0  gathered (a probe that could not run is itself a fact: it says why)\n"
                   "    1  failed\n    2  SPEC is invalid, or usage"),
    Command("init", "write a starter spec that suits this host", init, add_arguments=_init_arguments,
            takes_spec=False,
            epilog="exit codes:\n    0  written\n    1  failed to write it\n    2  --out exists, or usage"),
]
