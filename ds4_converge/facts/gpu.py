"""GPUs as the NVIDIA driver sees them.

* :class:`NvidiaGpus`: ``nvidia-smi --query-gpu=name,compute_cap,driver_version
  --format=csv,noheader`` -> list of :class:`Gpu` (``[]`` when there is no GPU or no
  ``nvidia-smi``; the probe status tells the two apart).
* :class:`NvidiaDriver`: the header of plain ``nvidia-smi`` -> driver version and the
  highest CUDA version that driver supports ("CUDA Version: 13.0").
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


class Gpu(FrozenModel):
    index: int
    name: str
    #: ``Version(12, 1)`` for GB10, ``Version(9, 0)`` for H200; ``None`` if reported as N/A.
    compute_cap: Version | None
    driver_version: str | None


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
