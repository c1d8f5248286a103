"""GPUs as the NVIDIA driver sees them.

* :class:`NvidiaGpus`: ``nvidia-smi --query-gpu=name,compute_cap,driver_version
  --format=csv,noheader`` -> list of :class:`Gpu` (``[]`` when there is no GPU or no
  ``nvidia-smi``; the probe status tells the two apart).
* :class:`NvidiaDriver`: the header of plain ``nvidia-smi`` -> driver version and the
  highest CUDA version that driver supports ("CUDA Version: 13.0").
* :class:`NvidiaComputeApps`: ``nvidia-smi --query-compute-apps=pid,process_name,used_memory``
  -> the processes that hold a CUDA context (another tenant on the GPU, or the old engine).
* :class:`NvidiaClocks`: ``nvidia-smi --query-gpu=index,clocks.sm,clocks.max.sm,power.draw,power.limit,pstate,
  clocks_event_reasons.active`` -> :class:`GpuClocks` (is the platform itself slow: clocks held low, a throttle).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from ds4_converge.facts.base import Fact, FactParseError, FrozenModel, Version

#: nvidia-smi exit status for "No devices were found".
NVSMI_NOT_FOUND = 6
NO_DEVICES = "No devices were found"
_NOT_AVAILABLE = {"[N/A]", "N/A", "[Not Supported]", "Not Supported", ""}


#: compute capabilities of GPUs that share the host's memory: GB10 (DGX Spark)
UNIFIED_MEMORY_CAPS = frozenset({Version(12, 1)})


class Gpu(FrozenModel):
    index: int
    name: str
    #: ``Version(12, 1)`` for GB10, ``Version(9, 0)`` for H200; ``None`` if reported as N/A.
    compute_cap: Version | None
    driver_version: str | None

    @property
    def unified_memory(self) -> bool:
        """Its memory is the host's (GB10): what the GPU holds, the host does not have."""
        return self.compute_cap in UNIFIED_MEMORY_CAPS


class DriverInfo(FrozenModel):
    driver_version: str | None = None
    #: The newest CUDA the driver supports, from the ``nvidia-smi`` header.
    cuda_version: Version | None = None


def _is_no_devices(stdout: str) -> bool:
    return stdout.strip() == NO_DEVICES


def parse_gpu_query(stdout: str) -> list[Gpu]:
    """CSV lines ``name, compute_cap, driver_version`` -> GPUs.

    ``No devices were found`` and empty output give ``[]``; any other line that is not
    three comma-separated fields raises.
    """
    if _is_no_devices(stdout):
        return []
    gpus: list[Gpu] = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        fields = [f.strip() for f in line.rsplit(",", 2)]
        if len(fields) != 3 or not fields[0]:
            raise FactParseError(f"not a name,compute_cap,driver_version line: {line!r}")
        name, cap, driver = fields
        compute_cap = None if cap in _NOT_AVAILABLE else Version.parse(cap)
        if driver in _NOT_AVAILABLE:
            drv = None
        elif re.fullmatch(r"\d+(\.\d+)*", driver):
            drv = driver
        else:
            raise FactParseError(f"not a driver version: {driver!r}")
        gpus.append(Gpu(index=len(gpus), name=name, compute_cap=compute_cap, driver_version=drv))
    return gpus


# the plain header says "Driver Version: 580.159.04"; `nvidia-smi -q` pads: "Driver Version      : 580.159.04"
_DRIVER_RE = re.compile(r"Driver Version\s*:\s*([0-9][0-9.]*)")
_CUDA_RE = re.compile(r"CUDA Version\s*:\s*(\d+)\.(\d+)")


def parse_nvidia_smi_header(stdout: str) -> DriverInfo:
    """Plain ``nvidia-smi`` output (or ``nvidia-smi -q``) -> driver and CUDA versions from its header.

    ``No devices were found`` gives an empty :class:`DriverInfo`; output without a
    ``Driver Version:`` field raises.
    """
    if _is_no_devices(stdout):
        return DriverInfo()
    driver = _DRIVER_RE.search(stdout)
    if driver is None:
        raise FactParseError("no 'Driver Version:' in nvidia-smi output")
    cuda = _CUDA_RE.search(stdout)
    return DriverInfo(
        driver_version=driver.group(1),
        cuda_version=Version(int(cuda.group(1)), int(cuda.group(2))) if cuda else None,
    )


@dataclass(frozen=True)
class NvidiaGpus(Fact[list[Gpu]]):
    ok_returncodes: ClassVar[frozenset[int] | None] = frozenset({0, NVSMI_NOT_FOUND})

    def command(self) -> list[str]:
        return ["nvidia-smi", "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"]

    def parse(self, stdout: str) -> list[Gpu]:
        return parse_gpu_query(stdout)

    def default(self) -> list[Gpu]:
        return []


@dataclass(frozen=True)
class NvidiaDriver(Fact[DriverInfo]):
    ok_returncodes: ClassVar[frozenset[int] | None] = frozenset({0, NVSMI_NOT_FOUND})

    def command(self) -> list[str]:
        return ["nvidia-smi"]

    def parse(self, stdout: str) -> DriverInfo:
        return parse_nvidia_smi_header(stdout)

    def default(self) -> DriverInfo:
        return DriverInfo()


# ---------------------------------------------------------------------------------- who else is on the GPU


class GpuProcess(FrozenModel):
    pid: int
    name: str
    #: ``None`` where the driver does not report it (``[N/A]``, as on a unified-memory GB10).
    used_memory_bytes: int | None = None


_MIB = 1024 * 1024


def _optional_number(text: str, what: str, line: str) -> float | None:
    text = text.strip()
    if text in _NOT_AVAILABLE:
        return None
    try:
        return float(text)
    except ValueError:
        raise FactParseError(f"{what} is not a number in {line!r}") from None


def parse_compute_apps(stdout: str) -> list[GpuProcess]:
    """CSV lines ``pid, process_name, used_memory`` (MiB, ``nounits``) -> processes; none: ``[]``."""
    if _is_no_devices(stdout):
        return []
    found: list[GpuProcess] = []
    for line in stdout.splitlines():
        if not line.strip() or line.strip().startswith("No running"):
            continue
        pid, sep, rest = line.partition(",")
        name, sep2, memory = rest.rpartition(",")
        if not (sep and sep2) or not pid.strip().isdigit():
            raise FactParseError(f"not a pid,process_name,used_memory line: {line!r}")
        mib = _optional_number(memory, "used_memory", line)
        found.append(GpuProcess(pid=int(pid), name=name.strip(),
                                used_memory_bytes=None if mib is None else int(mib * _MIB)))
    return found


@dataclass(frozen=True)
class NvidiaComputeApps(Fact[list[GpuProcess]]):
    ok_returncodes: ClassVar[frozenset[int] | None] = frozenset({0, NVSMI_NOT_FOUND})

    def command(self) -> list[str]:
        return ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits"]

    def parse(self, stdout: str) -> list[GpuProcess]:
        return parse_compute_apps(stdout)

    def default(self) -> list[GpuProcess]:
        return []


# ---------------------------------------------------------------------------- is the platform itself slow

#: ``clocks_event_reasons.active`` bits (NVML's nvmlClocksEventReason*; drivers before 535 call the field
#: ``clocks_throttle_reasons.active``, same bits). Idle, application clocks, sync boost and display clock
#: are not slowdowns; the rest hold the clocks down whatever the engine does.
EVENT_REASONS = {
    0x1: "idle", 0x2: "applications clocks setting", 0x4: "software power cap", 0x8: "hardware slowdown",
    0x10: "sync boost", 0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
    0x80: "hardware power brake slowdown", 0x100: "display clock setting",
}
SLOWDOWN_REASONS = frozenset({"software power cap", "hardware slowdown", "software thermal slowdown",
                              "hardware thermal slowdown", "hardware power brake slowdown"})


class GpuClocks(FrozenModel):
    index: int
    sm_mhz: float | None = None
    max_sm_mhz: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    #: ``"P0"`` (full performance) … ``"P12"``; ``None`` when not reported.
    pstate: str | None = None
    #: the active event reasons by name (``["idle"]``, ``["software power cap"]``).
    reasons: list[str] = []

    @property
    def slowdowns(self) -> list[str]:
        return [r for r in self.reasons if r in SLOWDOWN_REASONS]


CLOCK_FIELDS = "index,clocks.sm,clocks.max.sm,power.draw,power.limit,pstate,clocks_event_reasons.active"


def _reasons(text: str, line: str) -> list[str]:
    text = text.strip()
    if text in _NOT_AVAILABLE:
        return []
    try:
        mask = int(text, 16)
    except ValueError:
        raise FactParseError(f"clocks_event_reasons.active is not a hex mask in {line!r}") from None
    named = [name for bit, name in EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(EVENT_REASONS)
    return named + ([f"other (0x{unknown:x})"] if unknown else [])


def parse_clocks_query(stdout: str) -> list[GpuClocks]:
    """CSV lines of :data:`CLOCK_FIELDS` (``nounits``: MHz, W) -> one :class:`GpuClocks` per GPU."""
    if _is_no_devices(stdout):
        return []
    found: list[GpuClocks] = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 7 or not fields[0].isdigit():
            raise FactParseError(f"not a {CLOCK_FIELDS} line: {line!r}")
        index, sm, max_sm, draw, limit, pstate, reasons = fields
        found.append(GpuClocks(
            index=int(index), sm_mhz=_optional_number(sm, "clocks.sm", line),
            max_sm_mhz=_optional_number(max_sm, "clocks.max.sm", line),
            power_draw_w=_optional_number(draw, "power.draw", line),
            power_limit_w=_optional_number(limit, "power.limit", line),
            pstate=None if pstate in _NOT_AVAILABLE else pstate, reasons=_reasons(reasons, line)))
    return found


@dataclass(frozen=True)
class NvidiaClocks(Fact[list[GpuClocks]]):
    ok_returncodes: ClassVar[frozenset[int] | None] = frozenset({0, NVSMI_NOT_FOUND})

    def command(self) -> list[str]:
        return ["nvidia-smi", f"--query-gpu={CLOCK_FIELDS}", "--format=csv,noheader,nounits"]

    def parse(self, stdout: str) -> list[GpuClocks]:
        return parse_clocks_query(stdout)

    def default(self) -> list[GpuClocks]:
        return []
