"""Toolkit selection: toolchain.cuda_home, else the newest toolkit dir >= min_version; never PATH's nvcc."""
from __future__ import annotations

from ds4_converge.preflight import rules
from ds4_converge.core.toolkit import Toolkit
from ds4_converge.toolchain.select import compat_env, compat_package, select_toolkit
from fakehost import cuda, host, spec, toolkit

TOOLKITS = cuda(toolkit("/usr/local/cuda-12.8", "12.8"), toolkit("/usr/local/cuda-13.2", "13.2", compat=True),
                toolkit("/usr/local/cuda-13.0", "13.0"), path_nvccs=[("/usr/bin/nvcc", "12.0")],
                link_to="/usr/local/cuda-12.8")


def test_cpu_target_needs_no_toolkit():
    assert select_toolkit(spec(engine={"target": "cpu"}), host(cuda_facts=TOOLKITS)) == (Toolkit(), [])


def test_newest_toolkit_dir_wins_not_path_nor_the_link():
    chosen, findings = select_toolkit(spec(), host(cuda_facts=TOOLKITS))
    assert findings == []
    assert chosen == Toolkit(nvcc="/usr/local/cuda-13.2/bin/nvcc", cuda_home="/usr/local/cuda-13.2", version="13.2")


def test_cuda_home_pins_an_older_toolkit():
    chosen, findings = select_toolkit(spec(toolchain={"cuda_home": "/usr/local/cuda-13.0"}), host(cuda_facts=TOOLKITS))
    assert findings == [] and chosen.cuda_home == "/usr/local/cuda-13.0" and chosen.version == "13.0"


def test_cuda_home_through_a_link_resolves_to_the_real_dir():
    facts = host(cuda_facts=cuda(toolkit("/usr/local/cuda-13.0", "13.0", aliases=["/usr/local/cuda"]),
                                 link_to="/usr/local/cuda-13.0"))
    chosen, _ = select_toolkit(spec(toolchain={"cuda_home": "/usr/local/cuda/"}), facts)
    assert chosen.cuda_home == "/usr/local/cuda-13.0"


def test_cuda_home_older_than_min_version_is_an_error():
    chosen, (finding,) = select_toolkit(spec(toolchain={"cuda_home": "/usr/local/cuda-12.8", "min_version": "13.0"}),
                                        host(cuda_facts=TOOLKITS))
    assert chosen is None and finding.level == "error"
    assert finding.message == ("toolchain.cuda_home /usr/local/cuda-12.8 has nvcc 12.8, older than "
                               "toolchain.min_version 13.0")


def test_missing_cuda_home_is_an_error_listing_what_exists():
    chosen, (finding,) = select_toolkit(spec(toolchain={"cuda_home": "/opt/cuda-13.2"}), host(cuda_facts=TOOLKITS))
    assert chosen is None
    assert finding.message.startswith("toolchain.cuda_home /opt/cuda-13.2 is not a CUDA toolkit directory on this "
                                      "host (toolkits found: /usr/local/cuda-12.8 (nvcc 12.8), ")


def test_cuda_home_without_nvcc_or_version_is_an_error():
    facts = host(cuda_facts=cuda(toolkit("/usr/local/cuda-13.2", None, nvcc=False), toolkit("/opt/cuda", None)))
    _, (no_nvcc,) = select_toolkit(spec(toolchain={"cuda_home": "/usr/local/cuda-13.2"}), facts)
    assert no_nvcc.message == "toolchain.cuda_home /usr/local/cuda-13.2 has no executable bin/nvcc"
    _, (no_version,) = select_toolkit(spec(toolchain={"cuda_home": "/opt/cuda"}), facts)
    assert "did not report a release" in no_version.message


def test_only_a_path_nvcc_is_not_a_toolkit():
    facts = host(cuda_facts=cuda(path_nvccs=[("/usr/bin/nvcc", "13.2")], link_to=None))
    chosen, (finding,) = select_toolkit(spec(), facts)
    assert chosen is None
    assert finding.message == (
        "engine.target cuda-spark needs a CUDA toolkit with a working bin/nvcc; searched /usr/local/cuda*: no toolkit "
        "directories were found; the nvcc first on PATH (/usr/bin/nvcc, 13.2) is not used: the engine's Makefile "
        "builds with $(CUDA_HOME)/bin/nvcc, never PATH's")


def test_same_release_wrapper_first_on_path_is_not_a_trap():
    facts = host(driver_cuda="13.2", cuda_facts=cuda(toolkit("/usr/local/cuda-13.2", "13.2"),
                                                    path_nvccs=[("/usr/local/bin/nvcc", "13.2")],
                                                    link_to="/usr/local/cuda-13.2"))
    chosen, _ = select_toolkit(spec(), facts)
    assert rules.nvcc_findings(spec(), facts, chosen) == []


def test_compat_env_and_package():
    chosen, _ = select_toolkit(spec(), host(driver_cuda="13.0", cuda_facts=TOOLKITS))
    assert compat_env(chosen, host(driver_cuda="13.0", cuda_facts=TOOLKITS)) == {
        "LD_LIBRARY_PATH": "/usr/local/cuda-13.2/compat"}
    assert compat_env(chosen, host(driver_cuda="13.2", cuda_facts=TOOLKITS)) == {}
    assert compat_env(chosen, host(gpus=[], cuda_facts=TOOLKITS)) == {}  # no driver: nothing to add
    assert compat_package("13.2") == "cuda-compat-13-2"
