"""`ds4-converge facts` and `ds4-converge init`: what this host is, and a starter spec that suits it.

Both read the host through :func:`~ds4_converge.facts.gather_host_facts` only; :func:`starter_spec` is pure
(facts in, YAML text out), so it is tested on hand-built facts.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ds4_converge.cli.command import FAILED, INVALID, OK, CliError, Command
from ds4_converge.units import GIB, gib

if TYPE_CHECKING:
    from rich.table import Table

    from ds4_converge.facts import HostFacts

HF_REPO = "antirez/deepseek-v4-gguf"
Q2_IMATRIX = "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix.gguf"
#: The published file is about 81 GB; counted as 81 GiB so that the budget errs on the safe side.
Q2_IMATRIX_BYTES = 81 * GIB
CTX_CHOICES = (262144, 131072, 65536, 32768)
ENGINE_REPO = "https://github.com/Entrpi/ds4.git"
INSTALLER = "https://raw.githubusercontent.com/Entrpi/ds4-on-spark/main/install.sh"


# ------------------------------------------------------------------------------------------------ facts


def _port_argument(parser) -> None:
    parser.add_argument("--port", type=int, default=8000,
                        help="the port the engine is meant to serve on: who holds it now (default 8000)")


def facts(args, session) -> int:
    from ds4_converge.cli import report
    from ds4_converge.facts import gather_host_facts

    host = gather_host_facts(port=args.port)
    if session.json:
        session.emit(report.document("facts", ok=True, exit_code=OK, facts=json.loads(host.to_json())))
        return OK
    session.out.print(facts_table(host))
    return OK


def _gib(n: int | None) -> str:
    return "unknown" if n is None else gib(n)


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
        row("memory", f"{_gib(host.memory.total_bytes)} total, {_gib(host.memory.available_bytes)} available")
    else:
        row("memory", "unknown")
    for label, space in [(f"disk {host.root}", host.disk_root), *((f"disk {d}", s) for d, s in host.disk_models.items())]:
        if space is not None:
            at = "" if space.exists else f" (at {space.measured_at})"
            row(label, f"{_gib(space.available_bytes)} free of {_gib(space.total_bytes)} on {space.mount}{at}")
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


@dataclass
class Starter:
    """What :func:`starter_spec` decided, and the YAML it wrote."""

    target: str
    cuda_arch: str | None
    model: str
    ctx: int
    fits: bool
    notes: list[str] = field(default_factory=list)
    text: str = ""


def _q(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid YAML double-quoted scalar


def _pick_ctx(memory_total: int | None) -> tuple[int, bool, str]:
    """Largest ctx whose memory budget (q2 weights + KV) fits; (ctx, fits, judgement)."""
    if memory_total is None:
        return CTX_CHOICES[-1], False, "host memory is unknown"
    from ds4_converge.models import budget as memory_budget

    fallback = None
    for ctx in CTX_CHOICES:
        level, message = memory_budget.judge(memory_budget.estimate(Q2_IMATRIX_BYTES, ctx), memory_total)
        if level == "ok":
            return ctx, True, message
        if level == "warn" and fallback is None:
            fallback = (ctx, True, message)
    if fallback:
        return fallback
    level, message = memory_budget.judge(memory_budget.estimate(Q2_IMATRIX_BYTES, CTX_CHOICES[-1]), memory_total)
    return CTX_CHOICES[-1], False, message


def starter_spec(host: HostFacts, *, port: int = 8000, as_root: bool = True) -> Starter:
    """A commented starter spec for ``host`` (pure)."""
    from ds4_converge.preflight.rules import GB10, sm_arch

    notes: list[str] = []
    gpu = host.gpus[0] if host.gpus else None
    cc = gpu.compute_cap if gpu else None
    if gpu is None:
        target, arch = "cpu", None
        notes.append("no NVIDIA GPU found: cpu build (reference/debug only, very slow)")
    elif cc == GB10:
        target, arch = "cuda-spark", None
        notes.append(f"{gpu.name} (compute capability {cc}) is a DGX Spark: make cuda-spark")
    elif cc is not None:
        target, arch = "cuda", sm_arch(cc)
        notes.append(f"{gpu.name} (compute capability {cc}): make cuda CUDA_ARCH={arch}")
    else:
        target, arch = "cuda-generic", None
        notes.append(f"{gpu.name} reports no compute capability: make cuda-generic (CUDA_ARCH=native)")
    total = host.memory.total_bytes if host.memory else None
    ctx, fits, judgement = _pick_ctx(total)
    notes.append(f"q2 imatrix (~81 GiB) at ctx {ctx}: {judgement}")

    lines = [f"# Starter spec written by `ds4-converge init` from this host's facts: {host.arch or 'unknown arch'}, "
             f"{gpu.name if gpu else 'no GPU'}, {_gib(total)} RAM.",
             "# Check it with `ds4-converge SPEC --check`; every value is documented by `ds4-converge schema`."]
    if not fits:
        lines.append(f"# WARNING: the model will not fit in this host's memory ({judgement}).")
        lines.append("# DeepSeek-V4-Flash q2 needs about 90 GiB of RAM (unified memory on a DGX Spark); "
                     "converge will refuse to start it here.")
    lines += ["engine:",
              f"  repo: {_q(ENGINE_REPO)}",
              f"  installer: {_q(INSTALLER)}  # version = the DS4_REF it pins",
              f"  target: {target}"]
    if arch:
        lines.append(f"  cuda_arch: {arch}")
    if target == "cpu":
        lines.append("  # cpu: no NVIDIA GPU was found (nvidia-smi: "
                     f"{host.status('gpu.NvidiaGpus') or 'not probed'})")
    if target != "cpu":
        lines += _toolchain_lines(host, notes)
    lines += ["model:",
              f"  main: {_q(f'hf://{HF_REPO}/{Q2_IMATRIX}')}  # ~81 GB, downloaded under paths.root/models",
              "server:",
              "  host: 127.0.0.1  # ds4-server has no authentication: keep it on loopback",
              f"  port: {port}",
              f"  ctx: {ctx}" + ("  # the largest of 262144/131072/65536/32768 that fits in memory" if fits
                                 else "  # does not fit anyway: see the warning above"),
              "  # power: 100  # below 100 costs speed: 11.5 instead of 15.3 tok/s at 75",
              "  speculative: {mode: \"off\"}",
              "paths:",
              f"  root: {'/var/lib/ds4-converge' if as_root else '~/ds4-converge'}"
              + ("" if as_root else "  # not root: under the service user's home"),
              ""]
    return Starter(target=target, cuda_arch=arch, model=Q2_IMATRIX, ctx=ctx, fits=fits, notes=notes,
                   text="\n".join(lines))


def _toolchain_lines(host: HostFacts, notes: list[str]) -> list[str]:
    toolkits = [tk for tk in host.cuda.toolkits if tk.nvcc and tk.version]
    if not toolkits:
        notes.append("no CUDA toolkit found under /usr/local/cuda*: install one before converging")
        return ["toolchain:",
                "  # no CUDA toolkit was found under /usr/local/cuda*: install one (the build needs nvcc),",
                "  # or set cuda_home: /path/to/cuda-X.Y",
                "  min_version: \"13.0\""]
    from ds4_converge.toolchain.select import compat_package

    newest = max(toolkits, key=lambda t: t.version)
    lines = ["toolchain:", f"  min_version: \"{newest.version}\"  # newest found: {newest.path}"]
    driver = host.driver.cuda_version
    if driver is not None and newest.version > driver and not newest.compat_dir:
        package = compat_package(newest.version)
        notes.append(f"driver CUDA {driver} is older than nvcc {newest.version}: needs {package}")
        lines.append(f"  install_compat: false  # driver CUDA {driver} < nvcc {newest.version}: "
                     f"apt-get install {package}, or set true")
    return lines


def _write_new(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` only if it does not exist yet (atomic link; never overwrites)."""
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
    from ds4_converge.cli import report
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
    session.say(f"next: ds4-converge {path} --check")
    return OK


COMMANDS = [
    Command("facts", "the host facts preflight reads (GPU, driver, every nvcc, memory, disk, port holders)", facts,
            add_arguments=_port_argument, takes_spec=False),
    Command("init", "write a starter spec that suits this host", init, add_arguments=_init_arguments,
            takes_spec=False,
            epilog="exit codes:\n    0  written\n    1  failed to write it\n    2  --out exists, or usage"),
]
