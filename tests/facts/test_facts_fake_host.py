"""The executor against fake ``nvidia-smi``/``nvcc`` executables first on PATH."""

from __future__ import annotations

import os

import pytest

from ds4_converge.facts import FactRunner, NvccVersion, Version, gather, gather_host_facts, observe
from ds4_converge.facts.arch import Architecture
from ds4_converge.facts.cuda import CudaLayoutProbe
from ds4_converge.facts.gpu import NvidiaDriver, NvidiaGpus

# the executor runs the fake host's tools as real processes (timeouts included): not for make test-fast
pytestmark = pytest.mark.slow

PORT = 1  # nobody listens on tcp/1 in tests


def host(fakehost, local, *path_dirs, **kw):
    return gather_host_facts(port=PORT, cuda_globs=[str(local / "cuda*")], cuda_link=str(local / "cuda"),
                             runner=fakehost.runner(*path_dirs), **kw)


# ---- GPUs -----------------------------------------------------------------------------

def test_gb10(fakehost, local):
    bindir = fakehost.dir("bin")
    fakehost.gpu("NVIDIA GB10", "12.1", "580.95.05", "13.0", bindir=bindir)
    facts = host(fakehost, local, bindir)
    (gpu,) = facts.gpus
    assert (gpu.name, gpu.compute_cap, gpu.driver_version) == ("NVIDIA GB10", Version(12, 1), "580.95.05")
    assert facts.driver.cuda_version == Version(13, 0) and facts.driver.driver_version == "580.95.05"
    assert facts.status("gpu.NvidiaGpus") == "ok"


def test_h200(fakehost, local):
    bindir = fakehost.dir("bin")
    fakehost.gpu("NVIDIA H200", "9.0", "570.124.06", "12.8", bindir=bindir)
    facts = host(fakehost, local, bindir)
    assert [(g.name, g.compute_cap) for g in facts.gpus] == [("NVIDIA H200", (9, 0))]
    assert facts.driver.cuda_version == (12, 8)


def test_no_nvidia_smi_is_a_value(fakehost, local):
    facts = host(fakehost, local)
    assert facts.gpus == [] and facts.driver.cuda_version is None
    assert facts.status("gpu.NvidiaGpus") == "missing"
    assert facts.status("gpu.NvidiaDriver") == "missing"


def test_no_devices(fakehost, local):
    bindir = fakehost.dir("bin")
    fakehost.no_gpu(bindir=bindir)
    facts = host(fakehost, local, bindir)
    assert facts.gpus == [] and facts.status("gpu.NvidiaGpus") == "ok"
    assert facts.driver.driver_version is None


def test_driver_not_loaded(fakehost, local):
    bindir = fakehost.dir("bin")
    fakehost.driver_down(bindir=bindir)
    obs = observe(NvidiaGpus(), fakehost.runner(bindir))
    assert obs.value == [] and obs.probe.status == "failed" and obs.probe.returncode == 9
    assert "couldn't communicate" in obs.probe.detail


# ---- nvcc / toolkits --------------------------------------------------------------------

def test_stale_usr_bin_nvcc_in_front_of_13_2_toolkit(fakehost, local):
    usr_bin = fakehost.dir("usr/bin")
    fakehost.nvcc(usr_bin, "12.0", "12.0.140")
    tk = fakehost.toolkit("13.2")
    (local / "cuda").symlink_to(tk)
    facts = host(fakehost, local, usr_bin, tk / "bin")
    cuda = facts.cuda
    assert [(n.path, n.path_index, n.version) for n in cuda.nvccs] == [
        (str(usr_bin / "nvcc"), 0, Version(12, 0)),
        (str(tk / "bin/nvcc"), 1, Version(13, 2)),
    ]
    assert cuda.path_nvcc.version == (12, 0) and cuda.path_nvcc.build == "12.0.140"
    assert cuda.path_nvcc.toolkit is None
    assert cuda.link_nvcc.version == (13, 2)
    assert str(local / "cuda/bin/nvcc") in cuda.link_nvcc.aliases
    assert cuda.link.is_symlink and cuda.link.resolved == str(tk)
    assert [(t.path, t.version) for t in cuda.toolkits] == [(str(tk), (13, 2))]


def test_cuda_symlink_points_at_older_toolkit(fakehost, local):
    old = fakehost.toolkit("12.8")
    new = fakehost.toolkit("13.2")
    (local / "cuda").symlink_to("cuda-12.8")          # relative, like update-alternatives leaves it
    facts = host(fakehost, local, new / "bin")
    cuda = facts.cuda
    assert cuda.path_nvcc.version == (13, 2)
    assert cuda.link.target == "cuda-12.8" and cuda.link.resolved == str(old)
    assert cuda.link_toolkit.path == str(old)
    assert cuda.link_nvcc.version == (12, 8)            # what `make` would use by default
    assert {t.path: t.version for t in cuda.toolkits} == {str(old): (12, 8), str(new): (13, 2)}
    assert {t.path: t.aliases for t in cuda.toolkits}[str(old)] == [str(local / "cuda")]


@pytest.mark.parametrize("compat", [True, False])
def test_driver_cuda_13_0_with_toolkit_13_2(fakehost, local, compat):
    bindir = fakehost.dir("bin")
    fakehost.gpu("NVIDIA GB10", "12.1", "580.95.05", "13.0", bindir=bindir)
    tk = fakehost.toolkit("13.2", compat=compat)
    (local / "cuda").symlink_to(tk)
    facts = host(fakehost, local, bindir, tk / "bin")
    assert facts.driver.cuda_version == Version(13, 0)
    assert facts.cuda.link_toolkit.version == Version(13, 2)
    assert facts.cuda.path_nvcc.version == Version(13, 2)
    (toolkit,) = facts.cuda.toolkits
    if compat:
        assert toolkit.compat_dir == str(tk / "compat")
        assert toolkit.compat_libs == ["libcuda.so.1", "libcuda.so.595.45.04"]
        assert toolkit.compat_driver == "595.45.04"
    else:
        assert toolkit.compat_dir is None and toolkit.compat_libs == [] and toolkit.compat_driver is None


def test_path_dedupe_by_realpath(fakehost, local):
    tk = fakehost.toolkit("13.2")
    linked_dir = fakehost.root / "linked-bin"
    linked_dir.symlink_to(tk / "bin")
    facts = host(fakehost, local, tk / "bin", linked_dir, tk / "bin")
    (nvcc,) = facts.cuda.nvccs
    assert nvcc.path == str(tk / "bin/nvcc") and nvcc.path_index == 0
    assert nvcc.aliases == [str(linked_dir / "nvcc")]
    assert nvcc.toolkit == str(tk)


def test_broken_nvcc_has_no_version(fakehost, local):
    bindir = fakehost.dir("bin")
    fakehost.nvcc(bindir, "13.2", rc=1)
    facts = host(fakehost, local, bindir)
    assert facts.cuda.path_nvcc.version is None
    assert facts.status("cuda.NvccVersion") == "failed"


def test_no_cuda_at_all(fakehost, local):
    facts = host(fakehost, local)
    assert facts.cuda.nvccs == [] and facts.cuda.toolkits == []
    assert facts.cuda.link.exists is False and facts.cuda.path_nvcc is None and facts.cuda.link_nvcc is None


def test_dangling_cuda_link(fakehost, local):
    (local / "cuda").symlink_to("cuda-12.4")
    facts = host(fakehost, local)
    assert facts.cuda.link.is_symlink and not facts.cuda.link.exists
    assert facts.cuda.link.target == "cuda-12.4"


def test_layout_probe_default_globs_are_usr_local():
    assert CudaLayoutProbe().command()[-2:] == ["/usr/local/cuda", "/usr/local/cuda*"]


def test_build_env_seen_by_commands(fakehost, local):
    runner = fakehost.runner(env={"CUDA_HOME": "/opt/cuda-12.0", "NVCC": None})
    facts = gather_host_facts(port=PORT, runner=runner, cuda_globs=[str(local / "cuda*")],
                              cuda_link=str(local / "cuda"))
    assert facts.build_env["CUDA_HOME"] == "/opt/cuda-12.0"
    assert "NVCC" not in facts.build_env
    assert facts.build_env["PATH"] == str(fakehost.tools)


# ---- executor behaviour -----------------------------------------------------------------

def test_runner_missing_tool_is_a_value(fakehost):
    obs = observe(Architecture(), FactRunner(path=[fakehost.dir("empty")]))
    assert obs.value is None and obs.probe.status == "missing"


def test_runner_timeout(fakehost):
    bindir = fakehost.dir("bin")
    fakehost.exe(bindir / "nvidia-smi", "exec sleep 5\n")
    obs = observe(NvidiaGpus(), fakehost.runner(bindir, timeout=0.3))
    assert obs.value == [] and obs.probe.status == "timeout"


def test_runner_unparsed_output(fakehost):
    bindir = fakehost.dir("bin")
    fakehost.exe(bindir / "nvidia-smi", "echo 'Field \"compute_cap\" is not a valid field to query.'\n")
    obs = observe(NvidiaGpus(), fakehost.runner(bindir))
    assert obs.value == [] and obs.probe.status == "unparsed"


def test_runner_shell_127_is_missing(fakehost):
    bindir = fakehost.dir("bin")
    fakehost.exe(bindir / "nvidia-smi", "echo 'sh: 1: nvidia-smi: not found' >&2\nexit 127\n")
    obs = observe(NvidiaDriver(), fakehost.runner(bindir))
    assert obs.probe.status == "missing" and obs.value.cuda_version is None


def test_runner_sets_c_locale_and_path_string(fakehost):
    runner = FactRunner(path=os.pathsep.join([str(fakehost.tools)]), env={"LANG": "de_DE.UTF-8"})
    assert runner.environ["LC_ALL"] == "C"
    assert gather(Architecture, runner) == os.uname().machine


def test_gather_class_with_args_and_instance(fakehost):
    bindir = fakehost.dir("bin")
    nvcc = fakehost.nvcc(bindir, "13.2", "13.2.51")
    assert gather(NvccVersion, fakehost.runner(), path=str(nvcc)).version == (13, 2)
    assert gather(NvccVersion(path=str(nvcc))).build == "13.2.51"
    with pytest.raises(TypeError):
        gather(NvccVersion(path=str(nvcc)), None, path="x")
