"""All host facts in one typed, JSON-dumpable model, gathered through one executor."""

from __future__ import annotations

import os
import threading
from typing import Sequence

from ds4_converge.facts.addresses import HostAddresses
from ds4_converge.facts.arch import Architecture
from ds4_converge.facts.base import Fact, FactRunner, FrozenModel, Observation, Probe, ProbeStatus, observe
from ds4_converge.facts.cuda import (DEFAULT_CUDA_GLOBS, DEFAULT_CUDA_LINK, CudaFacts, CudaLayoutProbe, NvccRelease, NvccVersion, assemble_cuda, nvcc_paths)
from ds4_converge.facts.disk import DiskFree, DiskSpace, ExistingAncestors, assemble_disk
from ds4_converge.facts.environ import BuildEnvironment
from ds4_converge.facts.gpu import DriverInfo, Gpu, GpuClocks, GpuProcess, NvidiaClocks, NvidiaComputeApps, NvidiaDriver, NvidiaGpus
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
    #: the processes holding a CUDA context (the serving engine, or another tenant).
    gpu_processes: list[GpuProcess] = []
    #: per GPU: SM clock and its maximum, power, p-state and the active clock event (throttle) reasons.
    gpu_clocks: list[GpuClocks] = []
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
    #: Every IP address of this host's interfaces (``ip -j addr``); None: unknown (no ``ip``, older facts).
    addresses: list[str] | None = None
    service_user: str | None = None
    service_passwd: PasswdEntry | None = None
    #: Port holders that this root's supervisord runs (its engine, what descends from it), when the facts were
    #: captured for a spec (``ds4-converge facts SPEC``); None: ask supervisord here.
    supervised_pids: list[int] | None = None
    #: What those give back when stopped (anonymous, shared and pinned memory; GPU memory on a GB10), captured
    #: with them: the room a switch on that host has beyond MemAvailable.
    supervised_returned_bytes: int | None = None
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


def _side_by_side(chains: dict) -> dict:
    """{name: chain()} with each chain in its own thread (plain threads: concurrent.futures would also load
    logging, for nothing); an exception in a chain is raised here."""
    got: dict = {}

    def run(name, chain):
        try:
            got[name] = (chain(), None)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            got[name] = (None, exc)

    threads = [threading.Thread(target=run, args=item, daemon=True) for item in chains.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for value, exc in got.values():
        if exc is not None:
            raise exc
    return {name: got[name][0] for name in chains}


def _unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _chains(rec: _Recorder, *, port: int, disks: list[str], service_user: str | None, cuda_globs: Sequence[str],
            cuda_link: str) -> dict:
    """The facts as independent chains of commands, run side by side (:func:`_side_by_side`): a run waits for
    about the slowest chain, not for their sum."""

    def cuda() -> CudaFacts:  # layout, then one nvcc --version per distinct binary
        layout = rec.value(CudaLayoutProbe(globs=tuple(cuda_globs), link=cuda_link))
        releases: dict[str, NvccRelease | None] = {p: rec.value(NvccVersion(path=p)) for p in nvcc_paths(layout)}
        return assemble_cuda(layout, releases)

    def disk_space() -> dict[str, DiskSpace]:
        ancestors = rec.value(ExistingAncestors(paths=tuple(disks)))
        measured = _unique([ancestors[p] for p in disks if p in ancestors])
        entries = rec.value(DiskFree(paths=tuple(measured))) if measured else []
        return assemble_disk(disks, ancestors, measured, entries)

    def user() -> tuple[str | None, PasswdEntry | None]:
        name = service_user or rec.value(CurrentUser())
        return name, (rec.value(Passwd(user=name)) if name else None)

    return {"cuda": cuda, "disks": disk_space, "user": user, "listeners": lambda: port_holders(port, run=rec),
            "arch": lambda: rec.value(Architecture()), "gpus": lambda: rec.value(NvidiaGpus()),
            "driver": lambda: rec.value(NvidiaDriver()), "build_env": lambda: rec.value(BuildEnvironment()),
            "memory": lambda: rec.value(Memory()), "addresses": lambda: rec.value(HostAddresses()),
            "gpu_processes": lambda: rec.value(NvidiaComputeApps()), "gpu_clocks": lambda: rec.value(NvidiaClocks())}


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
    root_s = os.fspath(root)
    dirs = [os.fspath(d) for d in model_dirs]
    got = _side_by_side(_chains(rec, port=port, disks=_unique([root_s, *dirs]), service_user=service_user,
                                cuda_globs=cuda_globs, cuda_link=cuda_link))
    user_name, passwd = got["user"]
    disk = got["disks"]
    return HostFacts(
        arch=got["arch"],
        gpus=got["gpus"],
        driver=got["driver"],
        gpu_processes=got["gpu_processes"],
        gpu_clocks=got["gpu_clocks"],
        cuda=got["cuda"],
        build_env=got["build_env"],
        memory=got["memory"],
        root=root_s,
        disk_root=disk.get(root_s),
        disk_models={d: disk[d] for d in dirs if d in disk},
        port=port,
        listeners=got["listeners"],
        addresses=got["addresses"],
        service_user=user_name,
        service_passwd=passwd,
        probes=dict(sorted(rec.probes.items())),  # the same order whichever chain finished first
    )
