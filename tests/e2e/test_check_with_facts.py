"""`--check --facts FILE`: a spec for a GPU host planned on a host without one, against facts captured there."""
import json
import shutil
import subprocess
import sys

import pytest

from boxes import REPO

H200_FACTS = REPO / "tests" / "facts" / "fixtures" / "h200" / "facts-as-read.json"  # `facts --json` on an H200


@pytest.fixture
def gpu_spec(box):
    box.spec["engine"].update(target="cuda", cuda_arch="sm_90")
    box.write()
    return box


def test_a_gpu_spec_is_planned_against_the_targets_facts_and_says_which(gpu_spec):
    box = gpu_spec
    if shutil.which("nvidia-smi") is None:  # this host alone cannot plan it
        rc, alone = box.converge("--check")
        assert rc == 1 and "nvidia-smi is not installed" in alone["error"], alone
    rc, document = box.converge("--check", "--facts", str(H200_FACTS))
    assert rc == 0, document
    roles = {r["name"]: r for r in document["roles"]}
    assert [r["status"] for r in document["roles"]] == ["ok", "ok", "ok", "changed", "changed", "changed"]
    assert roles["engine"]["msg"].endswith("with make cuda"), roles["engine"]
    assert "NVIDIA H200 (9.0)" in roles["preflight"]["msg"], roles["preflight"]
    note = roles["preflight"]["notes"][0]
    assert note.startswith(f"planned against the host facts in {H200_FACTS}: arch x86_64, NVIDIA H200 (9.0), "
                           "driver 580.159.04, CUDA toolkits /usr/local/cuda-13.0 (13.0)"), note
    assert "read on this host, not the target" in roles["preflight"]["notes"][1]
    # captured without this spec: for port 8000 and /, not for this box's port and root
    warnings = " ".join(roles["preflight"]["warnings"])
    assert f"captured for port 8000, the spec serves {box.port}" in warnings
    assert f"free disk not captured for {box.root}" in warnings
    assert "/usr/local/cuda-13.0" in roles["toolchain"]["msg"], roles["toolchain"]  # the target's toolkit
    assert not box.root.exists(), "check mode leaves no trace"


def test_facts_captured_for_the_spec_fit_it(gpu_spec, tmp_path):
    """`ds4-converge facts SPEC --json` gathers what that spec needs: nothing to warn about when planned here."""
    box = gpu_spec
    rc, captured = box.json("facts", str(box.spec_path))
    assert rc == 0 and captured["spec"] == str(box.spec_path) and captured["hostname"], captured
    assert captured["facts"]["port"] == box.port and captured["facts"]["root"] == str(box.root)
    assert captured["facts"]["supervised_pids"] == []
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps(captured))
    rc, document = box.converge("--check", "--facts", str(facts))
    preflight = document["roles"][0]
    assert preflight["notes"][0].startswith(f"planned against the host facts in {facts} (captured on "), preflight
    assert not any(w.startswith("--facts:") for w in preflight["warnings"]), preflight


def test_facts_without_check_or_not_facts_at_all_are_refused(box, tmp_path):
    rc, document = box.converge("--facts", str(H200_FACTS))
    assert rc == 2 and "only with --check" in document["error"], document
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    rc, document = box.converge("--check", "--facts", str(junk))
    assert rc == 2 and document["error"].startswith(f"--facts {junk}: not JSON"), document
    junk.write_text(json.dumps({"gpus": "many"}))
    rc, document = box.converge("--check", "--facts", str(junk))
    assert rc == 2 and "not host facts of this version" in document["error"], document
    # each problem by its field, in one line: not pydantic's own text (its class name, [type=...], its URL)
    assert document["error"].endswith(": gpus: Input should be a valid list"), document["error"]
    assert "validation error" not in document["error"] and "[type=" not in document["error"], document["error"]
    assert not box.root.exists()


@pytest.mark.parametrize("kind", ["fifo", "device", "nested 2,000 deep", "17 MiB"])
def test_facts_that_are_special_huge_or_nested_deep_are_refused_at_once(box, tmp_path, kind):
    """A FIFO blocked the run forever; /dev/zero read on; JSON nested 2,000 deep was an internal error with a
    traceback file: each is exit 2 naming the file and what it is (issue 41)."""
    import os

    facts = tmp_path / "facts.json"
    if kind == "fifo":
        os.mkfifo(facts)
    elif kind == "device":
        facts = "/dev/zero"
    elif kind == "17 MiB":
        facts.write_text(json.dumps({"padding": "x" * (17 << 20)}))
    else:
        facts.write_text("[" * 2000 + "]" * 2000)
    proc = box.cli(str(box.spec_path), "--json", "--check", "--facts", str(facts), timeout=60)
    document = json.loads(proc.stdout)
    words = {"fifo": "a FIFO, not a regular file", "device": "a character device, not a regular file",
             "17 MiB": "17.0 MiB, more than the 16.0 MiB a facts document may hold",
             "nested 2,000 deep": "not JSON (nested too deep"}[kind]
    assert proc.returncode == 2 and document["error"].startswith(f"--facts {facts}: {words}"), document
    assert "traceback" not in proc.stdout + proc.stderr and "traceback_log" not in json.dumps(document)
    assert not box.root.exists()


def test_a_target_whose_available_memory_is_short_is_refused_with_the_numbers(gpu_spec, tmp_path):
    """MemTotal says 125.8 GiB; MemAvailable, 2 GiB: other programs hold the rest, and the plan says so."""
    box = gpu_spec
    facts = json.loads(H200_FACTS.read_text())
    facts["memory"]["available_bytes"] = 2 << 30
    short = tmp_path / "short.json"
    short.write_text(json.dumps(facts))
    rc, document = box.converge("--check", "--facts", str(short))
    assert rc == 1, document
    assert "memory budget does not fit in what is free now: weights " in document["error"], document
    assert "(MemAvailable 2.0 GiB - 4.0 GiB kept free)" in document["error"], document
    # the same box, with the serving engine captured as returning 8 GiB when the switch stops it: it fits
    facts.update(supervised_pids=[], supervised_returned_bytes=8 << 30)
    short.write_text(json.dumps(facts))
    rc, document = box.converge("--check", "--facts", str(short))
    assert rc == 0, document
    models = {r["name"]: r for r in document["roles"]}["models"]
    assert any("+ 8.0 GiB the serving engine returns" in n for n in models["notes"]), models


def test_on_a_gb10_b030961_counts_the_q8_tensors_it_keeps_twice_and_its_own_switch_turns_them_off(box, tmp_path):
    """Planned against a GB10's facts with the phantom (the Flash q2 tensor table, sparse): the models role reads
    the file's tensors and counts what b030961 copies again into device memory on an integrated GPU."""
    subprocess.run([sys.executable, str(REPO / "engine" / "models" / "make_phantom_gguf.py"), str(tmp_path)],
                   check=True, capture_output=True)
    facts = json.loads(H200_FACTS.read_text())
    facts["gpus"][0].update(name="NVIDIA GB10", compute_cap=[12, 1])
    facts["memory"] = {"total_bytes": int(119.7 * (1 << 30)), "available_bytes": int(115 * (1 << 30))}
    gb10 = tmp_path / "gb10.json"
    gb10.write_text(json.dumps(facts))
    box.spec["engine"].update(target="cuda-spark", ref="b030961")
    box.spec["model"] = {"main": str(tmp_path / "phantom-ds4flash.gguf")}
    box.spec["server"]["ctx"] = 524288
    box.write()
    rc, document = box.converge("--check", "--facts", str(gb10))
    assert rc == 1, document
    assert "+ device copies 6.1 GiB (Q8 tensors the engine also keeps aligned) +" in document["error"], document
    assert "DS4_CUDA_Q8_NO_ALIGNED=1" in document["error"], document
    box.spec["server"].setdefault("env", {})["DS4_CUDA_Q8_NO_ALIGNED"] = "1"
    box.write()
    rc, document = box.converge("--check", "--facts", str(gb10))
    assert "device copies" not in json.dumps(document), document
