"""Host facts for ds4-converge: pure parsers of command output, run by one executor.

Every fact is a small class with ``command()`` (argv), a pure ``parse(stdout)`` and a
``default()`` used when the tool is missing or its output is unusable; only
:class:`~.base.FactRunner` runs processes (see :mod:`.base`).

Facts (module.Class -> value):

* ``arch.Architecture``      ``uname -m`` -> ``"aarch64"``
* ``gpu.NvidiaGpus``         ``nvidia-smi --query-gpu=name,compute_cap,driver_version`` -> ``list[Gpu]``
* ``gpu.NvidiaDriver``       ``nvidia-smi`` header -> ``DriverInfo`` (driver version, driver CUDA version)
* ``cuda.CudaLayoutProbe``   nvcc on PATH, ``/usr/local/cuda*`` toolkits (+ ``compat/``), ``/usr/local/cuda`` link
* ``cuda.NvccVersion``       ``nvcc --version`` -> ``NvccRelease`` (``13.2``, ``13.2.51``)
* ``environ.BuildEnvironment`` ``env -0`` -> CUDA_HOME, NVCC, CUDA_ARCH, PATH, LD_LIBRARY_PATH, ...
* ``memory.Memory``          ``/proc/meminfo`` -> ``MemoryInfo`` (total, available, swap bytes)
* ``disk.ExistingAncestors`` + ``disk.DiskFree``  nearest existing parent, ``df -PB1`` -> ``DiskSpace``
* ``port.SsListeners``       ``ss -Hltnp 'sport = :PORT'`` -> ``list[Listener]`` (pid, command)
* ``port.ProcNetListeners``  fallback without ``ss``: ``/proc/net/tcp{,6}`` + ``/proc/*/fd``
* ``port.ProcessInfo``       ``/proc/PID/comm`` + ``cmdline``; ``port_holders(port)`` runs all three
* ``port.count_established`` ``/proc/net/tcp{,6}`` -> connections served on a port (requests in flight)
* ``addresses.HostAddresses`` ``ip -j addr`` -> every address of the host's interfaces
* ``users.Passwd``           ``getent passwd USER`` -> ``PasswdEntry`` (HOME); ``users.CurrentUser`` ``id -un``

:func:`gather_host_facts` runs them all and returns :class:`HostFacts` (``to_json()``);
``HostFacts.probes`` says per command whether it was ``ok``, ``missing``, ``failed``,
``timeout`` or ``unparsed``.
"""

from ds4_converge.facts.addresses import HostAddresses, parse_ip_addr_json
from ds4_converge.facts.arch import Architecture, parse_uname_machine
from ds4_converge.facts.base import (CommandResult, Fact, FactParseError, FactRunner, Observation, Probe, ProbeStatus, Version, evaluate, gather, observe)
from ds4_converge.facts.cuda import (CudaFacts, CudaLayout, CudaLayoutProbe, CudaLink, CudaToolkit, Nvcc, NvccRelease, NvccVersion, PathNvcc, assemble_cuda, parse_cuda_layout, parse_nvcc_version)
from ds4_converge.facts.disk import (DfEntry, DiskFree, DiskSpace, ExistingAncestors, assemble_disk, parse_ancestors, parse_df)
from ds4_converge.facts.environ import BuildEnvironment, parse_env0
from ds4_converge.facts.gpu import (DriverInfo, Gpu, GpuClocks, GpuProcess, NvidiaClocks, NvidiaComputeApps, NvidiaDriver, NvidiaGpus, parse_clocks_query, parse_compute_apps, parse_gpu_query, parse_nvidia_smi_header)
from ds4_converge.facts.host import HostFacts, gather_host_facts
from ds4_converge.facts.memory import Memory, MemoryInfo, parse_meminfo
from ds4_converge.facts.port import (Listener, ProcessDetails, ProcessInfo, ProcNetListeners, SsListeners, count_established, parse_comm_cmdline, parse_ls_proc_fds, parse_proc_listeners, parse_proc_net_tcp, parse_ss_listeners, port_holders)
from ds4_converge.facts.users import CurrentUser, Passwd, PasswdEntry, parse_getent_passwd, parse_id_user

__all__ = [name for name in dir() if not name.startswith("_")]
