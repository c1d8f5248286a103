"""The one fake host of the tests: hand-built facts for the pure rules, and fake executables (``nvidia-smi``,
``nvcc``, ``df``, ``apt-get``) for the fact executor and for the real CLI.

* hand-built facts: :func:`host`, :func:`cuda`, :func:`toolkit`, :func:`disk`, :func:`listener`, :func:`spec`;
* :class:`FakeHost`: a tmp dir of fake tools. ``runner()`` is a FactRunner whose PATH holds them and links to
  the real system tools only (never the host's own nvcc); ``environ_path()`` is a PATH for the real CLI with them
  first (the ``fake`` fixture sets it).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from ds4_converge.facts import FactRunner, HostFacts, Version
from ds4_converge.facts.cuda import CudaFacts, CudaLink, CudaToolkit, Nvcc
from ds4_converge.facts.disk import DiskSpace
from ds4_converge.facts.gpu import DriverInfo, Gpu
from ds4_converge.facts.memory import MemoryInfo
from ds4_converge.facts.port import Listener
from ds4_converge.facts.users import PasswdEntry
from ds4_converge.spec.model import Spec

GIB = 1024**3
HIDDEN = ("nvcc", "nvidia-smi")

# ------------------------------------------------------------------------------------ hand-built facts

BASE_SPEC = {
    "engine": {"repo": "https://example.invalid/ds4.git", "ref": "v0.2.0", "target": "cuda-spark"},
    "model": {"main": "/srv/gguf/model.gguf"},
}


def spec(**sections) -> Spec:
    """BASE_SPEC with sections merged one level deep: spec(engine={"target": "cpu"}, server={"power": 75})."""
    data = {k: dict(v) for k, v in BASE_SPEC.items()}
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return Spec.model_validate(data)


def toolkit(path: str, version: str | None, *, compat: bool = False, aliases=(), nvcc: bool = True) -> CudaToolkit:
    return CudaToolkit(path=path, realpath=path, aliases=list(aliases),
                       nvcc=f"{path}/bin/nvcc" if nvcc else None, nvcc_realpath=f"{path}/bin/nvcc" if nvcc else None,
                       version=Version.parse(version) if version else None,
                       compat_dir=f"{path}/compat" if compat else None,
                       compat_libs=["libcuda.so.1", "libcuda.so.595.45.04"] if compat else [],
                       compat_driver="595.45.04" if compat else None)


def cuda(*toolkits: CudaToolkit, path_nvccs=(), link: str | None = "/usr/local/cuda",
         link_to: str | None = None) -> CudaFacts:
    """CudaFacts: ``path_nvccs`` = [(path, version)] in PATH order (not part of a toolkit), then the toolkits'
    nvccs; ``link`` resolves to ``link_to``."""
    nvccs = [Nvcc(path=p, realpath=p, path_index=i, version=Version.parse(v)) for i, (p, v) in enumerate(path_nvccs)]
    for tk in toolkits:
        if tk.nvcc:
            nvccs.append(Nvcc(path=tk.nvcc, realpath=tk.nvcc_realpath, toolkit=tk.path, version=tk.version,
                              aliases=[f"{a}/bin/nvcc" for a in tk.aliases]))
    link_fact = None
    if link:
        link_fact = CudaLink(path=link, exists=link_to is not None, is_symlink=True, target=link_to,
                             resolved=link_to)
    return CudaFacts(nvccs=nvccs, toolkits=list(toolkits), link=link_fact)


GB10 = Gpu(index=0, name="NVIDIA GB10", compute_cap=Version(12, 1), driver_version="580.95.05")
H200 = Gpu(index=0, name="NVIDIA H200", compute_cap=Version(9, 0), driver_version="570.124.06")


def disk(path: str, free_gib: float, *, fs: str = "/dev/nvme0n1p2", mount: str = "/") -> DiskSpace:
    return DiskSpace(path=path, exists=True, measured_at=path, filesystem=fs, mount=mount,
                     total_bytes=int(3700 * GIB), available_bytes=int(free_gib * GIB))


def host(*, gpus=(GB10,), driver_cuda: str | None = "13.0", cuda_facts: CudaFacts | None = None,
         memory_gib: float = 119.7, root: str = "/var/lib/ds4-converge", root_free_gib: float = 500,
         **kw) -> HostFacts:
    """A healthy DGX Spark unless told otherwise: GB10, driver CUDA 13.0, toolkit 13.0 linked, 500 GiB free."""
    if cuda_facts is None:
        cuda_facts = cuda(toolkit("/usr/local/cuda-13.0", "13.0"), link_to="/usr/local/cuda-13.0")
    values = dict(
        arch="aarch64", gpus=list(gpus),
        driver=DriverInfo(driver_version="580.95.05" if gpus else None,
                          cuda_version=Version.parse(driver_cuda) if driver_cuda and gpus else None),
        cuda=cuda_facts, memory=MemoryInfo(total_bytes=int(memory_gib * GIB), available_bytes=int(100 * GIB)),
        root=root, disk_root=disk(root, root_free_gib), port=8000, service_user="ds4",
        service_passwd=PasswdEntry(name="ds4", uid=1001, gid=1001, gecos="", home="/home/ds4", shell="/bin/bash"))
    values.update(kw)
    return HostFacts(**values)


def listener(pid: int | None, command: str | None = None, cmdline=None, port: int = 8000) -> Listener:
    return Listener(address="127.0.0.1", port=port, pid=pid, command=command, cmdline=cmdline)


# --------------------------------------------------------------------------------------- fake executables

SMI_HEADER = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI {driver:<22} Driver Version: {driver:<14} CUDA Version: {cuda:<8}|
+-----------------------------------------+------------------------+----------------------+
|   0  {name:<34}On  |   0000000F:01:00.0  On |                  N/A |
+-----------------------------------------+------------------------+----------------------+
"""
#: what a FactRunner's PATH links to besides the fakes: never the host's own nvcc or nvidia-smi
SYSTEM_TOOLS = ("sh", "readlink", "dirname", "cat", "df", "ls", "uname", "env", "id", "getent", "ss", "sleep")


def write_exe(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


class FakeHost:
    """A tmp dir holding fake tools: ``bin`` (nvidia-smi, df, apt-get), ``usr_bin`` (a stale distro nvcc),
    ``local`` (stands in for /usr/local: cuda-X.Y dirs and the cuda link)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.usr_bin = root / "usr/bin"
        self.local = root / "local"
        for d in (self.bin, self.usr_bin, self.local):
            d.mkdir(parents=True, exist_ok=True)
        self.calls = root / "calls.log"

    def dir(self, name: str) -> Path:
        d = self.root / name
        d.mkdir(parents=True, exist_ok=True)
        return d

    def exe(self, path: Path, body: str) -> Path:
        return write_exe(path, body)

    # --- GPUs (nvidia-smi goes into ``bin`` unless told otherwise)
    def gpu(self, name: str, cap: str, driver: str = "580.95.05", cuda: str = "13.0", *,
            bindir: Path | None = None) -> Path:
        header = SMI_HEADER.format(driver=driver, cuda=cuda, name=name)
        return write_exe((bindir or self.bin) / "nvidia-smi", f"""\
case "$1" in
  --query-gpu=*) printf '%s\\n' '{name}, {cap}, {driver}' ;;
  *) cat <<'EOF'
{header}EOF
  ;;
esac
""")

    def gb10(self, cuda: str = "13.0") -> None:
        self.gpu("NVIDIA GB10", "12.1", "580.95.05", cuda)

    def h200(self, cuda: str = "13.0") -> None:
        self.gpu("NVIDIA H200", "9.0", "580.95.05", cuda)

    def no_gpu(self, *, bindir: Path | None = None) -> Path:
        return write_exe((bindir or self.bin) / "nvidia-smi", "echo 'No devices were found'\nexit 6\n")

    def driver_down(self, *, bindir: Path | None = None) -> Path:
        return write_exe((bindir or self.bin) / "nvidia-smi",
                         "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"\n"
                         "exit 9\n")

    # --- CUDA
    def nvcc(self, bindir: Path, release: str, build: str | None = None, rc: int = 0) -> Path:
        build = build or f"{release}.51"
        text = ("nvcc: NVIDIA (R) Cuda compiler driver\\n"
                "Copyright (c) 2005-2026 NVIDIA Corporation\\n"
                f"Cuda compilation tools, release {release}, V{build}\\n")
        return write_exe(bindir / "nvcc", f"printf '{text}'\nexit {rc}\n")

    def stale_nvcc(self, release: str = "12.0") -> Path:
        """A distro ``/usr/bin/nvcc`` (outside any toolkit dir), first on PATH."""
        return self.nvcc(self.usr_bin, release)

    def toolkit(self, version: str, *, compat: bool = False, compat_driver: str = "595.45.04") -> Path:
        """``local/cuda-<version>/bin/nvcc``, and with ``compat`` a ``compat/libcuda.so*`` of ``compat_driver``."""
        tk = self.local / f"cuda-{version}"
        self.nvcc(tk / "bin", version)
        if compat:
            (tk / "compat").mkdir()
            (tk / "compat" / f"libcuda.so.{compat_driver}").write_bytes(b"")
            (tk / "compat" / "libcuda.so.1").symlink_to(f"libcuda.so.{compat_driver}")
        return tk

    def link(self, target: Path | str) -> Path:
        link = self.local / "cuda"
        if link.is_symlink():
            link.unlink()
        link.symlink_to(target)
        return link

    # --- other tools
    def small_disk(self, free_bytes: int) -> None:
        """``df`` that reports ``free_bytes`` available for every path."""
        write_exe(self.bin / "df", f"""\
echo 'Filesystem 1-blocks Used Available Capacity Mounted on'
for p in "$@"; do
  case "$p" in -*) continue ;; esac
  echo '/dev/fake 10737418240 {10737418240 - free_bytes} {free_bytes} 90% /'
done
""")

    def apt_get(self, *, creates: Path | None = None, rc: int = 0) -> None:
        """``apt-get`` that logs its argv and (like cuda-compat-X-Y) installs ``creates``/libcuda.so.1."""
        make = (f"mkdir -p '{creates}' && : > '{creates}/libcuda.so.595.45.04' && "
                f"ln -sf libcuda.so.595.45.04 '{creates}/libcuda.so.1'\n") if creates else ""
        write_exe(self.bin / "apt-get", f"echo apt-get \"$@\" >> '{self.calls}'\n{make}exit {rc}\n")

    def called(self) -> str:
        return self.calls.read_text() if self.calls.exists() else ""

    # --- the fact executor
    @property
    def tools(self) -> Path:
        """A dir of links to the real system tools only (no host nvcc/nvidia-smi)."""
        tools = self.root / "systools"
        if not tools.exists():
            tools.mkdir()
            for tool in SYSTEM_TOOLS:
                real = shutil.which(tool)
                if real:
                    (tools / tool).symlink_to(real)
        return tools

    def runner(self, *path_dirs: Path, **kw) -> FactRunner:
        """PATH = the given dirs, then :attr:`tools`."""
        return FactRunner(path=[*path_dirs, self.tools], **kw)

    # --- the real CLI
    def set_args(self) -> list[str]:
        return ["--set", f"toolchain.search=[{self.local}/cuda*]", "--set", f"toolchain.cuda_link={self.local}/cuda"]

    def environ_path(self, system_path: str) -> str:
        """Fake dirs first, then the system PATH with the host's own nvcc/nvidia-smi hidden: a system dir holding
        one is replaced by a dir of links to everything else in it."""
        dirs = [str(self.bin), str(self.usr_bin)]
        for i, d in enumerate(p for p in system_path.split(os.pathsep) if p):
            if any(os.path.exists(os.path.join(d, tool)) for tool in HIDDEN):
                shadow = self.root / f"sys{i}"
                if not shadow.exists():
                    shadow.mkdir()
                    for entry in os.listdir(d):
                        if entry not in HIDDEN:
                            (shadow / entry).symlink_to(os.path.join(d, entry))
                d = str(shadow)
            dirs.append(d)
        return os.pathsep.join(dirs)
