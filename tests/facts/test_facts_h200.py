"""Output captured on a real H200 host (fixtures/h200/): the parsers, the host replayed, and what was read there."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ds4_converge.preflight.starter import starter_spec
from ds4_converge.facts import (HostFacts, Version, gather_host_facts, parse_clocks_query, parse_compute_apps,
                                parse_gpu_query, parse_nvcc_version, parse_nvidia_smi_header)
from ds4_converge.preflight.rules import all_findings, target_findings
from ds4_converge.spec.model import Spec

H200 = Path(__file__).resolve().parent / "fixtures" / "h200"
AS_READ = json.loads((H200 / "facts-as-read.json").read_text())


def text(name: str) -> str:
    return (H200 / name).read_text()


def test_gpu_query():
    (gpu,) = parse_gpu_query(text("nvidia-smi-query.csv"))
    assert (gpu.name, gpu.compute_cap, gpu.driver_version) == ("NVIDIA H200", Version(9, 0), "580.159.04")


@pytest.mark.parametrize("name", ["nvidia-smi.txt", "nvidia-smi-q.txt"])
def test_driver_and_its_cuda_from_either_nvidia_smi_output(name):
    info = parse_nvidia_smi_header(text(name))
    assert (info.driver_version, info.cuda_version) == ("580.159.04", Version(13, 0))


def test_clocks_power_pstate_and_reasons_as_nvidia_smi_q_showed_them():
    (clocks,) = parse_clocks_query(text("nvidia-smi-clocks.csv"))
    assert (clocks.sm_mhz, clocks.max_sm_mhz, clocks.power_draw_w, clocks.power_limit_w, clocks.pstate) == (
        345, 1980, 81.47, 700, "P0")
    assert clocks.reasons == ["idle"] and clocks.slowdowns == []
    q = text("nvidia-smi-q.txt")  # the fixture is written from this capture: keep the two saying the same
    assert "Performance State                                  : P0" in q and "SM                                             : 1980 MHz" in q


def test_no_compute_process_on_the_h200():
    assert parse_compute_apps(text("nvidia-smi-compute-apps.csv")) == []
    assert "Processes                                          : None" in text("nvidia-smi-q.txt")


def test_nvcc():
    release = parse_nvcc_version(text("nvcc.txt"))
    assert (release.version, release.build) == (Version(13, 0), "13.0.88")


@pytest.fixture
def h200_host(fakehost, local):
    """The H200 replayed: its nvidia-smi and nvcc outputs, its toolkit layout (/usr/local/cuda -> the
    alternatives link -> cuda-13.0, a cuda-13 link, compat libs of an older driver), and no `ss`."""
    bindir = fakehost.dir("bin")
    fakehost.exe(bindir / "nvidia-smi", f"""\
case "$1" in
  --query-gpu=index,clocks*) cat '{H200 / "nvidia-smi-clocks.csv"}' ;;
  --query-compute-apps=*) cat '{H200 / "nvidia-smi-compute-apps.csv"}' ;;
  --query-gpu=*) cat '{H200 / "nvidia-smi-query.csv"}' ;;
  -q) cat '{H200 / "nvidia-smi-q.txt"}' ;;
  *) cat '{H200 / "nvidia-smi.txt"}' ;;
esac
""")
    toolkit = fakehost.dir("local/cuda-13.0")
    fakehost.exe(toolkit / "bin" / "nvcc", f"cat '{H200 / 'nvcc.txt'}'\n")
    compat = fakehost.dir("local/cuda-13.0/compat")
    (compat / "libcuda.so.580.95.05").write_bytes(b"")
    (compat / "libcuda.so.1").symlink_to("libcuda.so.580.95.05")
    (compat / "libcuda.so").symlink_to("libcuda.so.1")
    (local / "cuda-13").symlink_to(toolkit)
    alternatives = fakehost.dir("etc/alternatives")
    (alternatives / "cuda").symlink_to(toolkit)
    (local / "cuda").symlink_to(alternatives / "cuda")
    (fakehost.tools / "ss").unlink(missing_ok=True)
    return gather_host_facts(port=1, cuda_globs=[str(local / "cuda*")], cuda_link=str(local / "cuda"),
                             runner=fakehost.runner(bindir, local / "cuda" / "bin")), local


def test_the_replayed_host_reads_as_it_did_there(h200_host):
    facts, local = h200_host
    there = HostFacts.model_validate(AS_READ)
    assert facts.gpus == there.gpus and facts.driver == there.driver
    assert facts.gpu_processes == [] and facts.status("gpu.NvidiaComputeApps") == "ok"
    assert [c.max_sm_mhz for c in facts.gpu_clocks] == [1980] and facts.status("gpu.NvidiaClocks") == "ok"
    (nvcc,) = facts.cuda.nvccs
    (nvcc_there,) = there.cuda.nvccs
    assert (nvcc.version, nvcc.build) == (nvcc_there.version, nvcc_there.build)
    assert nvcc.realpath == str(local / "cuda-13.0" / "bin" / "nvcc")
    (toolkit,) = facts.cuda.toolkits
    (toolkit_there,) = there.cuda.toolkits
    assert (toolkit.version, toolkit.compat_driver) == (toolkit_there.version, toolkit_there.compat_driver)
    assert sorted(Path(a).name for a in toolkit.aliases) == sorted(Path(a).name for a in toolkit_there.aliases)
    assert facts.cuda.link.is_symlink and facts.cuda.link.resolved == str(local / "cuda-13.0")
    assert facts.cuda.link.target.endswith("/etc/alternatives/cuda")
    # no ss: the listeners come from /proc instead, as they did there
    assert facts.status("port.SsListeners(port=1)") == "missing" == there.status("port.SsListeners(port=8000)")
    assert facts.status("port.ProcNetListeners(port=1)") == "ok" == there.status("port.ProcNetListeners(port=8000)")


def _spec(**engine) -> Spec:
    return Spec.model_validate({"engine": {"repo": "https://github.com/antirez/ds4", "ref": "main", **engine},
                                "model": {"main": "/models/ds4.gguf"}})


def test_what_was_read_there_still_reads_and_plans_an_h200():
    there = HostFacts.model_validate(AS_READ)
    dumped = json.loads(there.model_dump_json())
    # what was read there reads the same; what later versions added is unknown for it
    later_memory = {"swap_total_bytes": None, "swap_free_bytes": None}  # swap was read from a later version on
    assert dumped["memory"] == {**AS_READ["memory"], **later_memory}
    assert {k: v for k, v in dumped.items() if k in AS_READ and k != "memory"} == {
        k: v for k, v in AS_READ.items() if k != "memory"}
    assert {k: v for k, v in dumped.items() if k not in AS_READ} == {
        "supervised_pids": None, "supervised_returned_bytes": None, "addresses": None, "gpu_processes": [], "gpu_clocks": []}
    starter = starter_spec(there)
    assert (starter.target, starter.cuda_arch) == ("cuda", "sm_90")
    assert [f for f in target_findings(_spec(target="cuda", cuda_arch="sm_90"), there)] == []
    (wrong,) = target_findings(_spec(target="cuda-spark"), there)
    assert wrong.level == "error" and "sm_90" in wrong.fix
    # the toolkit (13.0) matches the driver's CUDA (13.0): no compat libraries, no stale nvcc, nothing to say
    assert all_findings(_spec(target="cuda", cuda_arch="sm_90"), there) == []
