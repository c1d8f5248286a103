"""All host facts in one typed, JSON-dumpable model, gathered through one executor."""

from __future__ import annotations

import os
from typing import Sequence

from ds4_converge.facts.arch import Architecture
from ds4_converge.facts.base import Fact, FactRunner, FrozenModel, Observation, Probe, ProbeStatus, observe
from ds4_converge.facts.cuda import (DEFAULT_CUDA_GLOBS, DEFAULT_CUDA_LINK, CudaFacts, CudaLayoutProbe, NvccRelease, NvccVersion, assemble_cuda, nvcc_paths)
from ds4_converge.facts.disk import DiskFree, DiskSpace, ExistingAncestors, assemble_disk
from ds4_converge.facts.environ import BuildEnvironment
from ds4_converge.facts.gpu import DriverInfo, Gpu, NvidiaDriver, NvidiaGpus
from ds4_converge.facts.memory import Memory, MemoryInfo
from ds4_converge.facts.port import Listener, port_holders
from ds4_converge.facts.users import CurrentUser, Passwd, PasswdEntry


class HostFacts(FrozenModel):
    """Everything the rules read about the host. Build one by hand in rule tests."""

    #: ``uname -m``; ``None`` if unknown.
    arch: str | None = None
    #: ``[]``: no GPU *or* no nvidia-smi; see ``probes`` / :meth:`status`.
    gpus: list[Gpu] = []
    driver: DriverInfo = DriverInfo()
    cuda: CudaFacts = CudaFacts()
    #: CUDA_HOME, NVCC, CUDA_ARCH, PATH, LD_LIBRARY_PATH... as the executor's commands see them.
    build_env: dict[str, str] = {}
    memory: MemoryInfo | None = None
    root: str = "/"
    disk_root: DiskSpace | None = None
    #: Keyed by the model dir as given.
    disk_models: dict[str, DiskSpace] = {}
    port: int | None = None
    listeners: list[Listener] = []
    service_user: str | None = None
    service_passwd: PasswdEntry | None = None
    #: One entry per command run, keyed by fact key (``gpu.NvidiaGpus``,
    #: ``cuda.NvccVersion(path='/usr/bin/nvcc')``).
    probes: dict[str, Probe] = {}

    @property
    def service_home(self) -> str | None:
        return self.service_passwd.home if self.service_passwd else None

    def status(self, fact_name: str) -> ProbeStatus | None:
        """Status of the first probe named ``fact_name`` (e.g. ``"gpu.NvidiaGpus"``)."""
        for key, probe in self.probes.items():
            if key == fact_name or key.startswith(fact_name + "("):
                return probe.status
        return None

    def to_json(self, indent: int | None = 2) -> str:
        return self.model_dump_json(indent=indent)

    @classmethod
    def from_json(cls, text: str) -> "HostFacts":
        return cls.model_validate_json(text)


class _Recorder:
    def __init__(self, runner: FactRunner) -> None:
        self.runner = runner
        self.probes: dict[str, Probe] = {}

    def __call__(self, fact: Fact) -> Observation:
        obs = observe(fact, self.runner)
        self.probes[obs.probe.fact] = obs.probe
        return obs

    def value(self, fact: Fact):
        return self(fact).value


def _unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


def gather_host_facts(
    *,
    port: int,
    model_dirs: Sequence[str | os.PathLike[str]] = (),
    root: str | os.PathLike[str] = "/",
    service_user: str | None = None,
    cuda_globs: Sequence[str] = DEFAULT_CUDA_GLOBS,
    cuda_link: str = DEFAULT_CUDA_LINK,
    runner: FactRunner | None = None,
) -> HostFacts:
    """Run every fact through ``runner`` (default: a plain :class:`FactRunner`).

    + port: TCP port whose listeners to report.
    + model_dirs: dirs whose free space to report (may not exist yet).
    + root: path whose free space is ``disk_root``.
    + service_user: whose passwd entry (HOME) to read; default the executor's user.
    + cuda_globs / cuda_link: toolkit dirs and the ``CUDA_HOME`` default link (tests point these at tmp).
    """
    rec = _Recorder(runner or FactRunner())

    # CUDA: layout, then one nvcc --version per distinct binary
    layout = rec.value(CudaLayoutProbe(globs=tuple(cuda_globs), link=cuda_link))
    releases: dict[str, NvccRelease | None] = {p: rec.value(NvccVersion(path=p)) for p in nvcc_paths(layout)}

    # disk
    root_s = os.fspath(root)
    dirs = [os.fspath(d) for d in model_dirs]
    wanted = _unique([root_s, *dirs])
    ancestors = rec.value(ExistingAncestors(paths=tuple(wanted)))
    measured = _unique([ancestors[p] for p in wanted if p in ancestors])
    entries = rec.value(DiskFree(paths=tuple(measured))) if measured else []
    disks = assemble_disk(wanted, ancestors, measured, entries)

    # port
    listeners = port_holders(port, run=rec)

    # user
    user = service_user or rec.value(CurrentUser())
    passwd = rec.value(Passwd(user=user)) if user else None

    return HostFacts(
        arch=rec.value(Architecture()),
        gpus=rec.value(NvidiaGpus()),
        driver=rec.value(NvidiaDriver()),
        cuda=assemble_cuda(layout, releases),
        build_env=rec.value(BuildEnvironment()),
        memory=rec.value(Memory()),
        root=root_s,
        disk_root=disks.get(root_s),
        disk_models={d: disks[d] for d in dirs if d in disks},
        port=port,
        listeners=listeners,
        service_user=user,
        service_passwd=passwd,
        probes=rec.probes,
    )

