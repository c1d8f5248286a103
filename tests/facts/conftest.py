"""Fake host tools for executor tests: fake ``nvidia-smi``/``nvcc`` scripts in tmp dirs,
plus a dir of links to the real system tools so PATH can exclude the host's own nvcc."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ds4_converge.facts import FactRunner
from fake_tools import SMI_HEADER, write_exe

SYSTEM_TOOLS = ("sh", "readlink", "dirname", "cat", "df", "ls", "uname", "env", "id", "getent", "ss", "sleep")





class Fakes:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.tools = root / "systools"
        self.tools.mkdir()
        for tool in SYSTEM_TOOLS:
            real = shutil.which(tool)
            if real:
                (self.tools / tool).symlink_to(real)

    def exe(self, path: Path, body: str) -> Path:
        return write_exe(path, body)

    def dir(self, name: str) -> Path:
        d = self.root / name
        d.mkdir(parents=True, exist_ok=True)
        return d

    def nvcc(self, bindir: Path, release: str, build: str | None = None, rc: int = 0) -> Path:
        build = build or f"{release}.0"
        text = ("nvcc: NVIDIA (R) Cuda compiler driver\\n"
                "Copyright (c) 2005-2026 NVIDIA Corporation\\n"
                f"Cuda compilation tools, release {release}, V{build}\\n")
        return write_exe(bindir / "nvcc", f"printf '{text}'\nexit {rc}\n")

    def toolkit(self, version: str, *, compat_driver: str | None = None, parent: str = "local") -> Path:
        """``<root>/<parent>/cuda-<version>/bin/nvcc`` (and ``compat/libcuda.so*``)."""
        tk = self.dir(f"{parent}/cuda-{version}")
        self.nvcc(tk / "bin", version)
        if compat_driver:
            compat = tk / "compat"
            compat.mkdir()
            (compat / f"libcuda.so.{compat_driver}").write_bytes(b"")
            (compat / "libcuda.so.1").symlink_to(f"libcuda.so.{compat_driver}")
        return tk

    def nvidia_smi(self, bindir: Path, name: str, cap: str, driver: str, cuda: str) -> Path:
        header = SMI_HEADER.format(driver=driver, cuda=cuda, name=name)
        return write_exe(bindir / "nvidia-smi", f"""\
case "$1" in
  --query-gpu=*) printf '%s\\n' '{name}, {cap}, {driver}' ;;
  *) cat <<'EOF'
{header}EOF
  ;;
esac
""")

    def nvidia_smi_no_devices(self, bindir: Path) -> Path:
        return write_exe(bindir / "nvidia-smi", "echo 'No devices were found'\nexit 6\n")

    def nvidia_smi_driver_down(self, bindir: Path) -> Path:
        return write_exe(bindir / "nvidia-smi", "echo \"NVIDIA-SMI has failed because it couldn't communicate "
                                                "with the NVIDIA driver.\"\nexit 9\n")

    def runner(self, *path_dirs: Path, **kw) -> FactRunner:
        """PATH = given dirs, then the system tool links only (no host nvcc/nvidia-smi)."""
        return FactRunner(path=[*path_dirs, self.tools], **kw)


@pytest.fixture
def fakes(tmp_path: Path) -> Fakes:
    return Fakes(tmp_path)


@pytest.fixture
def local(fakes: Fakes) -> Path:
    """The tmp stand-in for ``/usr/local``."""
    return fakes.dir("local")

