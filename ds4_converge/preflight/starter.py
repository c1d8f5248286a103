"""A starter spec that suits this host: its facts in, commented YAML out (`ds4-converge init` writes it).

Pure: judged by preflight's own rules (which target a GPU needs) and the memory budget (the largest ctx that
fits), so it is tested on hand-built facts.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ds4_converge.units import GIB, gib

if TYPE_CHECKING:
    from ds4_converge.facts import HostFacts

HF_REPO = "antirez/deepseek-v4-gguf"
Q2_IMATRIX = "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix.gguf"
#: The published file is about 81 GB; counted as 81 GiB so that the budget errs on the safe side.
Q2_IMATRIX_BYTES = 81 * GIB
CTX_CHOICES = (262144, 131072, 65536, 32768)
ENGINE_REPO = "https://github.com/Entrpi/ds4.git"
INSTALLER = "https://raw.githubusercontent.com/Entrpi/ds4-on-spark/main/install.sh"


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


def _pick_ctx(memory_total: int | None, unified: bool = False) -> tuple[int, bool, str]:
    """Largest ctx whose memory budget (q2 weights + KV) fits; (ctx, fits, judgement)."""
    if memory_total is None:
        return CTX_CHOICES[-1], False, "host memory is unknown"
    from ds4_converge.models import budget as memory_budget

    fallback = None
    for ctx in CTX_CHOICES:
        level, message = memory_budget.judge(memory_budget.estimate(Q2_IMATRIX_BYTES, ctx, unified=unified),
                                             memory_total)
        if level == "ok":
            return ctx, True, message
        if level == "warn" and fallback is None:
            fallback = (ctx, True, message)
    if fallback:
        return fallback
    level, message = memory_budget.judge(memory_budget.estimate(Q2_IMATRIX_BYTES, CTX_CHOICES[-1], unified=unified),
                                         memory_total)
    return CTX_CHOICES[-1], False, message


def starter_spec(host: HostFacts, *, port: int = 8000, as_root: bool = True) -> Starter:
    """A commented starter spec for ``host`` (pure)."""
    from ds4_converge.preflight.rules import GB10, context_note, sm_arch

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
    ctx, fits, judgement = _pick_ctx(total, unified=gpu is not None and gpu.unified_memory)
    notes.append(f"q2 imatrix (~81 GiB) at ctx {ctx}: {judgement}")
    beyond_training = context_note(ctx)
    if beyond_training:
        notes.append(beyond_training)

    lines = [f"# Starter spec written by `ds4-converge init` from this host's facts: {host.arch or 'unknown arch'}, "
             f"{gpu.name if gpu else 'no GPU'}, {gib(total)} RAM.",
             "# Check it with `ds4-converge SPEC --check`; every value is documented by `ds4-converge schema`."]
    if not fits:
        lines.append(f"# WARNING: the model will not fit in this host's memory ({judgement}).")
        lines.append("# DeepSeek-V4-Flash q2 needs what the line above says, in RAM (unified memory on a DGX Spark); "
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
                                 else "  # does not fit anyway: see the warning above")
              + ("; above the trained 65536: YaRN extension" if beyond_training else ""),
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
