"""Host preflight rules: the known DGX Spark traps, found from facts before anything is built, stopped or started.

Every rule is a pure function ``(spec, facts, ...) -> list[Finding]``: it reads a hand-buildable
:class:`~ds4_converge.facts.HostFacts` and never touches the host. An ``error`` stops the run before any
change; a ``warning`` is printed and the run goes on; ``info`` says what was decided for you.

1. :func:`nvcc_findings`     another nvcc first on PATH, ``/usr/local/cuda`` at an older toolkit, exported
                              ``CUDA_HOME``/``NVCC`` (warnings: the build passes both explicitly); a missing or
                              too old toolkit (error, from :func:`~ds4_converge.toolchain.select.select_toolkit`)
2. :func:`compat_findings`   toolkit newer than the driver's CUDA: compat dir -> info (LD_LIBRARY_PATH set),
                              none -> error naming ``cuda-compat-X-Y`` (unless ``toolchain.install_compat``)
3. :func:`target_findings`   make target vs the GPU (cuda-spark only on GB10 = compute capability 12.1)
4. :func:`power_findings`    ``server.power`` below 100 costs measured speed (warning)
4b. :func:`speculation_findings` MTP drafts deeper than the exact verifier (warning);
   :func:`context_findings` a ctx above the model's trained context is YaRN extension (info)
5. :func:`exposure_findings` a non-loopback host serves an API without authentication (warning);
                             :func:`bind_findings` an address no interface of this host has (server.host,
                             front.host, front.metrics.host: error)
6. :func:`path_findings`     ``~``/``$HOME``/``${VAR}`` expand on this host for the service user; unknown -> error
7. :func:`port_findings`     the port held by a process that is not our engine (error, PID and command)
8. :func:`disk_findings`     free disk for the build and downloads (the memory budget is checked by the
                             models role, before any build)

:func:`all_findings` runs them all in that order.
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from ds4_converge.facts import HostFacts, Version
from ds4_converge.facts.port import blocks
from ds4_converge.spec.hostpaths import UnknownVariable, expand as expand_path
from ds4_converge.models.placement import entries as model_entries, is_local
from ds4_converge.core.plan import Finding
from ds4_converge.core.toolkit import Toolkit
from ds4_converge.tool_command import tool_command
from ds4_converge.units import GIB, gib
from ds4_converge.engine_knowledge import load as load_knowledge
from ds4_converge.spec.model import TARGETS, Spec
from ds4_converge.toolchain.select import (chosen_toolkit, compat_dir, compat_package, find_toolkit, needs_compat, select_toolkit)

#: Free space a build needs under paths.root: the exported tree, objects, binaries and the engine git cache.
BUILD_BYTES = 2 * GIB
#: The engine's default --kv-disk-space-mb.
DEFAULT_KV_DISK_MB = load_knowledge()["server_defaults"]["kv_disk_space_mb"]
GB10 = Version(12, 1)
CUDA_TARGETS = tuple(t for t in TARGETS if t.startswith("cuda"))

Expander = Callable[[str], Path]


def sm_arch(cc: Version) -> str:
    """Compute capability -> ``CUDA_ARCH``: 9.0 -> ``sm_90``, 12.1 -> ``sm_121``."""
    return f"sm_{cc.major}{cc.minor}"


# --------------------------------------------------------------------------------------------- rule 1: nvcc


def _same_dir(a: str, b: str) -> bool:
    return posixpath.normpath(a) == posixpath.normpath(b)


def nvcc_findings(spec: Spec, facts: HostFacts, toolkit: Toolkit | None) -> list[Finding]:
    """Other nvccs a person, an installer or a bare ``make`` would get instead of ``toolkit``."""
    if spec.engine.target == "cpu" or toolkit is None or not toolkit.nvcc:
        return []
    chosen = chosen_toolkit(toolkit, facts)
    chosen_real = chosen.nvcc_realpath if chosen else toolkit.nvcc
    explicit = f"the build passes NVCC={toolkit.nvcc} CUDA_HOME={toolkit.cuda_home} to make explicitly"
    out: list[Finding] = []
    first = facts.cuda.path_nvcc
    # a different binary of the same release (a wrapper, a second install) builds the same code: not a trap
    if first is not None and first.realpath != chosen_real and str(first.version) != toolkit.version:
        out.append(Finding(
            "warning",
            f"nvcc first on PATH is {first.path} ({first.version or 'version unknown'}), not the build's "
            f"{toolkit.nvcc} ({toolkit.version}): a shell or installer running `nvcc` gets the other one; "
            f"{explicit}",
            fix=f"put {toolkit.cuda_home}/bin first on PATH, or remove the stale nvcc"))
    link, link_tk = facts.cuda.link, facts.cuda.link_toolkit
    if (link is not None and link_tk is not None and link_tk.version is not None and toolkit.version
            and link_tk.version < Version.parse(toolkit.version)):
        out.append(Finding(
            "warning",
            f"{link.path} points at {link_tk.path} (nvcc {link_tk.version}), older than the build's "
            f"{toolkit.cuda_home} (nvcc {toolkit.version}): the engine's Makefile defaults CUDA_HOME to "
            f"{link.path}, so a manual `make` builds with {link_tk.version}; {explicit}",
            fix=f"ln -sfn {toolkit.cuda_home} {link.path}"))
    env = facts.build_env
    home = env.get("CUDA_HOME")
    if home and not (chosen and find_toolkit(facts, home) is chosen) and not _same_dir(home, toolkit.cuda_home):
        out.append(Finding(
            "warning",
            f"the environment exports CUDA_HOME={home}, which the engine's Makefile honours silently over its "
            f"default; ds4-converge overrides it on the make command line (CUDA_HOME={toolkit.cuda_home})",
            fix=f"unset CUDA_HOME in the shell profile, or set toolchain.cuda_home: {home} if you meant it"))
    nvcc = env.get("NVCC")
    if nvcc and not _is_nvcc(facts, nvcc, chosen_real):
        out.append(Finding(
            "warning",
            f"the environment exports NVCC={nvcc}, which the engine's Makefile honours silently over "
            f"$(CUDA_HOME)/bin/nvcc; ds4-converge overrides it on the make command line (NVCC={toolkit.nvcc})",
            fix="unset NVCC in the shell profile"))
    return out


def _is_nvcc(facts: HostFacts, path: str, realpath: str | None) -> bool:
    if realpath is None:
        return False
    if _same_dir(path, realpath):
        return True
    return any(n.realpath == realpath and any(_same_dir(path, p) for p in (n.path, *n.aliases))
               for n in facts.cuda.nvccs)


# ----------------------------------------------------------------------------------- rule 2: forward compat


def compat_findings(spec: Spec, facts: HostFacts, toolkit: Toolkit | None) -> list[Finding]:
    """A toolkit newer than the driver's CUDA needs the forward-compat libcuda at run time."""
    if toolkit is None or not needs_compat(toolkit, facts):
        return []
    driver = facts.driver
    package = compat_package(toolkit.version)
    directory = compat_dir(toolkit, facts)
    newer = (f"nvcc {toolkit.version} ({toolkit.cuda_home}) is newer than the driver's CUDA "
             f"{driver.cuda_version} (driver {driver.driver_version or 'unknown'})")
    if directory is None:
        if spec.toolchain.install_compat:
            return [Finding("info", f"{newer}: the toolchain role installs {package} "
                                    f"(toolchain.install_compat) and adds its compat dir to LD_LIBRARY_PATH")]
        expected = f"{toolkit.cuda_home}/compat"
        tk = chosen_toolkit(toolkit, facts)
        why = (f"{expected} has no libcuda.so" if tk is not None and tk.compat_dir else f"{expected} does not exist")
        return [Finding("error", f"{newer}, so the engine needs the forward-compat libraries, and {why}",
                        fix=f"apt-get install {package} (or set toolchain.install_compat: true), "
                            f"or build with a toolkit no newer than CUDA {driver.cuda_version}")]
    out = [Finding("info", f"{newer}: LD_LIBRARY_PATH={directory} goes into the engine's environment "
                           f"(forward-compat libcuda from {package})")]
    user_value = spec.server.env.get("LD_LIBRARY_PATH")
    if user_value is not None and directory not in user_value.split(":"):
        out.append(Finding("warning", f"server.env sets LD_LIBRARY_PATH={user_value}, which replaces "
                                      f"{directory}: the engine will load the driver's older libcuda",
                           fix=f"add {directory} to server.env.LD_LIBRARY_PATH, or remove it from server.env"))
    return out


# ------------------------------------------------------------------------------------ rule 3: target vs GPU


def _no_gpu_reason(facts: HostFacts) -> str:
    status = facts.status("gpu.NvidiaGpus")
    if status == "missing":
        return "nvidia-smi is not installed"
    if status in ("failed", "timeout", "unparsed"):
        probe = next((p for k, p in facts.probes.items() if k.startswith("gpu.NvidiaGpus")), None)
        detail = f": {probe.detail}" if probe and probe.detail else ""
        return f"nvidia-smi {status} (is the NVIDIA driver loaded?){detail}"
    return "nvidia-smi lists no GPU"


def target_findings(spec: Spec, facts: HostFacts) -> list[Finding]:
    """The make target must suit the GPU the engine runs on (device 0)."""
    target, arch = spec.engine.target, spec.engine.cuda_arch
    if target not in CUDA_TARGETS:
        return []
    if not facts.gpus:
        return [Finding("error", f"engine.target {target} builds for an NVIDIA GPU, but {_no_gpu_reason(facts)}",
                        fix="use engine.target: cpu (reference/debug build, slow), or fix the GPU driver")]
    gpu = facts.gpus[0]
    cc = gpu.compute_cap
    if cc is None:
        return [Finding("warning", f"GPU 0 ({gpu.name}) reports no compute capability, so engine.target "
                                   f"{target} cannot be checked against it")]
    seen = f"GPU 0 is {gpu.name} (compute capability {cc})"
    suggest = f"engine.target: cuda with engine.cuda_arch: {sm_arch(cc)}"
    if target == "cuda-spark" and cc != GB10:
        return [Finding("error", f"engine.target cuda-spark is for DGX Spark (GB10, compute capability {GB10}), "
                                 f"but {seen}", fix=f"use {suggest}")]
    if target == "cuda" and arch and arch != "native":
        built = _arch_version(arch)
        if built is not None and built > cc:
            return [Finding("error", f"engine.cuda_arch {arch} builds code that {seen} cannot run",
                            fix=f"use {'engine.target: cuda-spark' if cc == GB10 else suggest}")]
        if built is not None and built != cc:
            better = "engine.target: cuda-spark" if cc == GB10 else f"engine.cuda_arch: {sm_arch(cc)}"
            return [Finding("warning", f"engine.cuda_arch {arch} does not match {seen}: the driver JIT-compiles "
                                       f"the kernels at start and they run slower", fix=f"use {better}")]
    if cc == GB10 and target != "cuda-spark":
        return [Finding("warning", f"{seen}, a DGX Spark: engine.target {target} misses the GB10-only kernels "
                                   f"that make cuda-spark builds (the fork server warns about generic builds)",
                        fix="use engine.target: cuda-spark")]
    return []


def _arch_version(arch: str) -> Version | None:
    digits = arch.removeprefix("sm_").rstrip("a")
    if not digits.isdigit() or len(digits) < 2:
        return None
    return Version(int(digits[:-1]), int(digits[-1]))


# ------------------------------------------------------------------------------------------ rule 4: power


def power_findings(spec: Spec, knowledge: Mapping | None = None) -> list[Finding]:
    power = spec.server.power
    if power is None or power >= 100:
        return []
    knowledge = knowledge or load_knowledge()
    cost = knowledge["power_cost"]
    return [Finding("warning", f"server.power {power} throttles the GPU duty cycle: measured {cost['tok_s']} "
                               f"instead of {cost['full_tok_s']} tok/s at power {cost['power']} on GB10",
                    fix="set server.power: 100, or leave it unset")]


def speculation_findings(spec: Spec, knowledge: Mapping | None = None) -> list[Finding]:
    """MTP drafts deeper than the exact verifier takes change the output upstream: said, not refused (upstream's
    own README shows --mtp-draft 2, and the exact verifier makes it safe)."""
    speculative, server = spec.server.speculative, spec.server
    mtp = (knowledge or load_knowledge())["mtp"]
    if speculative.mode != "mtp" or speculative.draft <= mtp["exact_max_draft"]:
        return []
    if mtp["strict_env"] in server.env or mtp["strict_flag"] in server.extra_args:
        return [Finding("info", f"server.speculative.draft {speculative.draft}: the exact MTP verifier is on "
                                f"({mtp['strict_env']} or {mtp['strict_flag']}): the output stays the same, the "
                                f"drafts are no speed win")]
    return [Finding("warning", f"server.speculative.draft {speculative.draft}: MTP drafts of depth >= 2 are "
                               f"verified in a batched pass that can change the output upstream (corrupted answers "
                               f"are reported there); draft {mtp['exact_max_draft']} is exact",
                    fix=f"set server.speculative.draft: {mtp['exact_max_draft']}, or set "
                        f"{mtp['strict_env']}: \"1\" in server.env for the exact verifier (no speed win)")]


def context_findings(spec: Spec, knowledge: Mapping | None = None) -> list[Finding]:
    """A ctx above the trained context is served by YaRN extension: said, not refused."""
    return [Finding("info", note) for note in [context_note(spec.server.ctx, knowledge)] if note]


def context_note(ctx: int, knowledge: Mapping | None = None) -> str | None:
    knowledge = knowledge or load_knowledge()
    context = knowledge["context"]
    trained = knowledge["gguf"]["main_model"]["keys"][context["trained_key"]]["value"]
    if ctx <= trained:
        return None
    measured = context["measured_tokens"]
    return (f"server.ctx {ctx} is above the model's trained context of {trained} tokens "
            f"(rope.scaling.original_context_length): what lies beyond it is YaRN extension; "
            f"{measured // 1024}K has been measured serving on a DGX Spark (the KV in managed memory, decode "
            f"about as fast), but answers that lean on far context are not what training saw")


# ------------------------------------------------------------------------------------- rule 5: exposure


def is_loopback(host: str) -> bool:
    return host == "localhost" or host.startswith("127.")


def exposure_findings(spec: Spec) -> list[Finding]:
    host = spec.server.host
    if is_loopback(host):
        return []
    if spec.server.expose:
        return [Finding("info", f"server.host {host}: the API is reachable from the network without "
                                f"authentication (acknowledged by server.expose: true)")]
    return [Finding("warning", f"server.host {host} serves the API beyond this machine, and ds4-server has no "
                               f"authentication: anyone who reaches port {spec.server.port} can use it",
                    fix="bind 127.0.0.1 behind an authenticating proxy, or set server.expose: true "
                        "to acknowledge")]


def bind_findings(spec: Spec, facts: HostFacts) -> list[Finding]:
    """server.host, front.host and front.metrics.host must each be an address of this host (or any, or loopback):
    another cannot be bound; the engine would only log it while the probe waits out its deadline, and HAProxy's
    reload would fail while the old front door went on serving."""
    binds = [("server.host", spec.server.host, "ds4-server")]
    if spec.front is not None:
        binds.append(("front.host", spec.front.host, "HAProxy"))
        if spec.front.metrics is not None:
            binds.append(("front.metrics.host", spec.front.metrics.host, "HAProxy"))
    out = []
    for field, host, who in binds:
        if is_loopback(host) or host == "0.0.0.0" or facts.addresses is None or host in facts.addresses:
            continue
        mine = [a for a in facts.addresses if ":" not in a]
        out.append(Finding("error", f"{field} {host}: no interface of this host has this address (it has "
                                    f"{', '.join(mine) or 'no IPv4 address'}): {who} could not bind it",
                           fix="bind 127.0.0.1, 0.0.0.0 (every interface) or one of this host's addresses"))
    return out


# ------------------------------------------------------------------------------------------ rule 6: paths


def _is_url(value: str) -> bool:
    return "://" in value or value.startswith("git@")


def spec_paths(spec: Spec) -> list[tuple[str, str]]:
    """(field, raw value) of every spec path that is expanded on the host."""
    out = [("paths.root", spec.paths.root)]
    if spec.engine.repo and not _is_url(spec.engine.repo):
        out.append(("engine.repo", spec.engine.repo))
    for slot, entry in model_entries(spec.model):
        if is_local(entry):
            out.append((f"model.{slot}", entry.source))
        if entry.dest:
            out.append((f"model.{slot}.dest", entry.dest))
    if spec.server.kv_disk_dir:
        out.append(("server.kv_disk_dir", spec.server.kv_disk_dir))
    if spec.toolchain.cuda_home:
        out.append(("toolchain.cuda_home", spec.toolchain.cuda_home))
    out += [(f"toolchain.search[{i}]", glob) for i, glob in enumerate(spec.toolchain.search)]
    out.append(("toolchain.cuda_link", spec.toolchain.cuda_link))
    out += [(f"health.warmup[{i}]", prompt) for i, prompt in enumerate(spec.health.warmup)]
    return out


def expand_paths(spec: Spec, expand: Expander) -> tuple[dict[str, Path], list[Finding]]:
    """Expand every spec path with ``expand`` (``Context.host_path``): {field: path}, and an error per unknown
    variable, naming the field."""
    paths: dict[str, Path] = {}
    findings: list[Finding] = []
    for name, raw in spec_paths(spec):
        try:
            paths[name] = expand(raw)
        except UnknownVariable as exc:
            findings.append(Finding("error", f"{name}: {exc} (spec paths expand on the target host for the "
                                              f"service user, never in the caller's shell)",
                                    fix="use an absolute path, ~ or $HOME, or export the variable in the "
                                        "environment ds4-converge runs in"))
    return paths, findings


def path_findings(spec: Spec, expand: Expander) -> list[Finding]:
    return expand_paths(spec, expand)[1]


def facts_expander(facts: HostFacts, env: Mapping[str, str] | None = None, base_dir: Path = Path("/")) -> Expander:
    """Expand for the service user the facts describe (its HOME from getent); pure given ``env``."""
    home, user = facts.service_home, facts.service_user

    def expand(raw: str) -> Path:
        if home is None or user is None:
            if "~" in raw[:1] or "$" in raw:
                raise UnknownVariable(f"{raw}: the service user's home is unknown on this host")
            return Path(raw) if Path(raw).is_absolute() else base_dir / raw
        return expand_path(raw, home=home, user=user, env=env or {}, base_dir=base_dir)

    return expand


# ------------------------------------------------------------------------------------------- rule 7: port


def port_findings(spec: Spec, facts: HostFacts, our_pids: Iterable[int] = ()) -> list[Finding]:
    """Listeners on server.port that keep server.host from binding it (the same address, or a wildcard: another
    loopback address is no collision), other than our supervised engine (``our_pids``: it and its descendants)."""
    ours = set(our_pids)
    port = spec.server.port
    out = []
    for listener in facts.listeners:
        if listener.pid is not None and listener.pid in ours:
            continue
        if not blocks(listener.address, spec.server.host):
            continue
        if listener.pid is None:
            out.append(Finding("error", f"port {port} is held by a process this user cannot see "
                                        f"(listening on {listener.address}), which ds4-converge does not manage",
                               fix=f"run `ss -ltnp 'sport = :{port}'` as root to find it, stop it, "
                                   f"or choose another server.port"))
            continue
        holder, fix = held_by(listener, "server.port")
        out.append(Finding("error", f"port {port} is held by {holder}", fix=fix))
    return out


def other_root(cmdline: Sequence[str] | None) -> str | None:
    """The paths.root of a process another ds4-converge root runs, read from its command line: an engine runs
    ROOT/releases/ID/ds4-server (the second argument where the binary is a script run by its interpreter, as the
    simulator's is), the front door `haproxy … -f ROOT/front/haproxy.cfg`."""
    args = list(cmdline or ())
    for program in args[:2]:
        release = posixpath.dirname(program)
        if posixpath.basename(program) == "ds4-server" and posixpath.basename(posixpath.dirname(release)) == "releases":
            return posixpath.dirname(posixpath.dirname(release))
    for flag, value in zip(args, args[1:]):
        if flag == "-f" and value.endswith("/front/haproxy.cfg") and "haproxy" in posixpath.basename(args[0]):
            return value[:-len("/front/haproxy.cfg")]
    return None


def held_by(listener, field: str) -> tuple[str, str]:
    """Who holds a port that `field` names, in words, and how to free it: a process of another ds4-converge root
    (the other example spec, say) is named with that root and its stop command; anything else by pid and argv."""
    command = " ".join(listener.cmdline) if listener.cmdline else (listener.command or "?")
    if len(command) > 160:
        command = command[:157] + "..."
    root = other_root(listener.cmdline)
    if root is not None:
        program = "haproxy" if root + "/front/haproxy.cfg" in listener.cmdline else "ds4-server"
        return (f"pid {listener.pid} ({program}), which another ds4-converge root runs (paths.root {root})",
                f"stop that root first: {tool_command()} stop SPEC, with the spec whose paths.root is {root} "
                f"(make stop, for spec/examples/sim.yaml); or choose another {field}")
    return (f"pid {listener.pid} ({command}), which ds4-converge does not manage",
            f"stop pid {listener.pid} or choose another {field}")


# ------------------------------------------------------------------------------------------ rule 8: disk


@dataclass(frozen=True)
class DiskNeed:
    """Bytes something will write under ``path`` (``facts.root`` or a key of ``facts.disk_models``).

    ``certain=False``: only if it happens (a build when releases exist already): a shortfall is a warning.
    """

    what: str
    path: str
    bytes: int
    certain: bool = True


def disk_needs(facts: HostFacts, *, build_bytes: int = BUILD_BYTES, build_certain: bool = True,
               model_bytes_needed: Mapping[str, int] | None = None,
               kv_dir: str | None = None, kv_bytes: int = 0) -> list[DiskNeed]:
    """The seam for downloads: ``model_bytes_needed`` maps a model dir to the bytes still to be written there
    (the models role knows remote sizes; preflight passes sizes the spec declares)."""
    needs = []
    if build_bytes:
        needs.append(DiskNeed("the engine build", facts.root, build_bytes, build_certain))
    for directory, size in (model_bytes_needed or {}).items():
        if size > 0:
            needs.append(DiskNeed(f"model downloads into {directory}", directory, size))
    if kv_dir and kv_bytes:
        needs.append(DiskNeed(f"KV checkpoints in {kv_dir} (server.kv_disk_space_mb)", kv_dir, kv_bytes, False))
    return needs


def disk_findings(facts: HostFacts, needs: Sequence[DiskNeed]) -> list[Finding]:
    """Sum the needs per filesystem and compare with its free space."""
    groups: dict[tuple[str, str], list[DiskNeed]] = {}
    available: dict[tuple[str, str], int] = {}
    out: list[Finding] = []
    for need in needs:
        space = facts.disk_root if need.path == facts.root else facts.disk_models.get(need.path)
        if space is None:
            out.append(Finding("warning", f"free disk at {need.path} is unknown (df failed), so {need.what} "
                                          f"({gib(need.bytes)}) could not be checked"))
            continue
        key = (space.filesystem, space.mount)
        groups.setdefault(key, []).append(need)
        available[key] = space.available_bytes
    for (filesystem, mount), group in groups.items():
        free = available[(filesystem, mount)]
        certain = sum(n.bytes for n in group if n.certain)
        total = sum(n.bytes for n in group)
        if total <= free:
            continue
        parts = ", ".join(f"{gib(n.bytes)} for {n.what}" + ("" if n.certain else " (if needed)") for n in group)
        level = "error" if certain > free else "warning"
        out.append(Finding(level, f"not enough disk on {mount} ({filesystem}): {gib(free)} free, "
                                  f"{gib(total)} needed ({parts})",
                           fix=f"free {gib(total - free)} on {mount}, or move paths.root / model dirs "
                               f"to a larger disk"))
    return out


# --------------------------------------------------------------------------------------------------- all


def all_findings(spec: Spec, facts: HostFacts, *, expand: Expander | None = None, our_pids: Iterable[int] = (),
                 cuda_home: str | None = None, disk: Sequence[DiskNeed] | None = None,
                 knowledge: Mapping | None = None) -> list[Finding]:
    """Every rule, in issue order.

    + expand: spec path -> host path (``Context.host_path``); default :func:`facts_expander`.
    + our_pids: the supervised engine and its descendants (not a foreign port holder).
    + cuda_home: ``toolchain.cuda_home`` expanded (default: as written).
    + disk: what will be written where (:func:`disk_needs`); default: a first build under ``facts.root``.
    """
    toolkit, selection = select_toolkit(spec, facts, cuda_home=cuda_home)
    findings = [*selection, *nvcc_findings(spec, facts, toolkit), *compat_findings(spec, facts, toolkit),
                *target_findings(spec, facts), *power_findings(spec, knowledge),
                *speculation_findings(spec, knowledge), *context_findings(spec, knowledge), *exposure_findings(spec),
                *bind_findings(spec, facts),
                *path_findings(spec, expand or facts_expander(facts)), *port_findings(spec, facts, our_pids),
                *disk_findings(facts, disk if disk is not None else disk_needs(facts))]
    return findings
