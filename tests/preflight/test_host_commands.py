"""`ds4-converge facts` and `ds4-converge init`: the real CLI on fake GPUs, and the starter spec on hand-built facts."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from ds4_converge.facts import HostFacts, Version
from ds4_converge.preflight.starter import Q2_IMATRIX, starter_spec
from ds4_converge.spec.loader import load_spec
from boxes import report_document
from fakehost import GB10, H200, cuda, host, toolkit


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ds4_converge.cli", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"})


# ----------------------------------------------------------------------------- facts


def test_facts_json_is_host_facts_with_the_fake_gpu_and_path_nvcc(fake):
    fake.gb10(cuda="13.0")
    stale = fake.stale_nvcc("12.0")
    proc = cli("facts", "--json", "--port", "1")
    assert proc.returncode == 0, proc.stderr
    facts = HostFacts.from_json(json.dumps(report_document(proc)["facts"]))
    assert [(g.name, g.compute_cap) for g in facts.gpus] == [("NVIDIA GB10", Version(12, 1))]
    assert facts.driver.cuda_version == Version(13, 0)
    assert facts.cuda.path_nvcc.path == str(stale) and facts.cuda.path_nvcc.version == Version(12, 0)
    assert facts.port == 1 and facts.memory.total_bytes > 0


def test_facts_table_names_gpu_nvcc_and_port(fake):
    fake.h200(cuda="13.2")
    fake.stale_nvcc("12.0")
    proc = cli("facts", "--port", "1")
    assert proc.returncode == 0, proc.stderr
    assert "NVIDIA H200 (compute capability 9.0, sm_90)" in proc.stdout
    assert f"{fake.usr_bin}/nvcc 12.0 [PATH #1]" in proc.stdout
    assert "port 1" in proc.stdout and "free" in proc.stdout


# ----------------------------------------------------------------------------- init, real CLI


@pytest.mark.parametrize("gpu, target, arch", [("gb10", "cuda-spark", None), ("h200", "cuda", "sm_90"),
                                               ("none", "cpu", None)])
def test_init_writes_a_valid_spec_for_the_gpu(fake, tmp_path, gpu, target, arch):
    if gpu == "gb10":
        fake.gb10()
    elif gpu == "h200":
        fake.h200()
    else:
        fake.no_gpu()
    out = tmp_path / "spec.yaml"
    proc = cli("init", "--out", str(out), "--port", "8123")
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {out}: target {target}" in proc.stdout
    spec = load_spec(out).spec
    assert (spec.engine.target, spec.engine.cuda_arch, spec.server.port) == (target, arch, 8123)
    assert spec.engine.installer.endswith("ds4-on-spark/main/install.sh")
    assert spec.model.main.source.endswith(Q2_IMATRIX)


def test_init_refuses_to_overwrite(fake, tmp_path):
    out = tmp_path / "spec.yaml"
    out.write_text("mine\n")
    proc = cli("init", "--out", str(out))
    assert proc.returncode == 2
    assert "exists: not overwriting it" in proc.stderr
    assert out.read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fakehost", "spec.yaml"]  # no temp file left


def test_init_json(fake, tmp_path):
    fake.gb10()
    proc = cli("init", "--json", "--out", str(tmp_path / "s.yaml"))
    assert proc.returncode == 0, proc.stderr
    document = report_document(proc)
    assert document["target"] == "cuda-spark" and document["model"] == Q2_IMATRIX


def test_init_json_on_an_existing_file_is_a_document_too(fake, tmp_path):
    (tmp_path / "s.yaml").write_text("mine\n")
    proc = cli("init", "--json", "--out", str(tmp_path / "s.yaml"))
    document = report_document(proc)
    assert proc.returncode == 2 and document["aborted"] == "usage" and "not overwriting" in document["error"]


# ----------------------------------------------------------------------------- starter_spec, pure


def load_text(tmp_path, text):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return load_spec(path).spec


def test_spark_with_128_gb_gets_q2_at_262144(tmp_path):
    facts = host(gpus=[GB10], memory_gib=119.7,
                 cuda_facts=cuda(toolkit("/usr/local/cuda-13.0", "13.0"), link_to="/usr/local/cuda-13.0"))
    starter = starter_spec(facts)
    assert (starter.target, starter.cuda_arch, starter.ctx, starter.fits) == ("cuda-spark", None, 262144, True)
    spec = load_text(tmp_path, starter.text)
    assert spec.engine.target == "cuda-spark" and spec.server.ctx == 262144
    assert spec.toolchain.min_version == "13.0"
    assert spec.model.main.source == f"hf://antirez/deepseek-v4-gguf/{Q2_IMATRIX}"
    assert "WARNING" not in starter.text
    # 262144 is above the trained 65536: init says so, in its notes and beside the value
    (note,) = [n for n in starter.notes if "trained context" in n]
    assert "YaRN extension" in note and "512K" in note
    assert "  ctx: 262144  # the largest of 262144/131072/65536/32768 that fits in memory; above the trained " \
           "65536: YaRN extension" in starter.text


def test_a_ctx_within_the_trained_context_has_no_note():
    starter = starter_spec(host(gpus=[H200], memory_gib=86))
    assert starter.ctx <= 65536 and not [n for n in starter.notes if "trained context" in n]


def test_small_ram_says_the_model_will_not_fit(tmp_path):
    starter = starter_spec(host(gpus=[H200], memory_gib=64))
    assert not starter.fits and starter.ctx == 32768
    assert "# WARNING: the model will not fit in this host's memory (does not fit: weights 81.0 GiB" in starter.text
    assert "90 GiB" not in starter.text, "one figure for what the model needs: the budget's, on the WARNING line"
    spec = load_text(tmp_path, starter.text)
    assert (spec.engine.target, spec.engine.cuda_arch) == ("cuda", "sm_90")


def test_ctx_shrinks_to_fit(tmp_path):
    starter = starter_spec(host(gpus=[H200], memory_gib=92))
    assert starter.fits and starter.ctx < 262144
    # on a GB10 the same memory holds no q2 load: the GPU takes its share of the host's memory while it loads
    spark = starter_spec(host(gpus=[GB10], memory_gib=92))
    assert not spark.fits and "more while it loads (unified memory)" in spark.text


def test_driver_older_than_the_newest_toolkit_is_noted(tmp_path):
    facts = host(gpus=[GB10], driver_cuda="13.0", cuda_facts=cuda(toolkit("/usr/local/cuda-13.2", "13.2"),
                                                                 link_to="/usr/local/cuda-13.2"))
    starter = starter_spec(facts)
    assert "install_compat: false  # driver CUDA 13.0 < nvcc 13.2: apt-get install cuda-compat-13-2" in starter.text
    assert load_text(tmp_path, starter.text).toolchain.min_version == "13.2"


def test_no_toolkit_and_no_gpu(tmp_path):
    gpu_without_toolkit = starter_spec(host(cuda_facts=cuda(link=None)))
    assert "# no CUDA toolkit was found" in gpu_without_toolkit.text
    load_text(tmp_path, gpu_without_toolkit.text)
    cpu = starter_spec(host(gpus=[]), as_root=False)
    assert cpu.target == "cpu" and "toolchain:" not in cpu.text
    assert load_text(tmp_path, cpu.text).paths.root == "~/ds4-converge"
