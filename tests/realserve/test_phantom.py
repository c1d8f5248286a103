"""The phantom generator against the real engine: each upstream ds4-server loads the sparse model and answers the
known word, and classifies the phantom support files as the engine's source says (b030961's
support_model_detect(); 8d57664 binds legacy MTP only)."""
from __future__ import annotations

import json
import subprocess
import urllib.request

import gguf
import pytest

import real_engine
from boxes import free_port
from ds4_converge.units import GIB
from serving import KV_CACHE_ARGS, PROMPT, WORD, phantom_gguf

# each token costs seconds here: bounded per test above the default 300 s (each wait inside is bounded too)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
LISTENING = "listening on http://"


def test_the_phantom_is_sparse_and_has_the_full_layout(phantom):
    stat = phantom.main.stat()
    assert stat.st_size > 86 * 10**9 and stat.st_blocks * 512 < 16 * 2**20  # ~86.7 GB apparent, a few MB on disk
    reader = gguf.GGUFReader(str(phantom.main))
    tensors = {t.name: t for t in reader.tensors}
    assert len(tensors) == 1331
    assert tensors["blk.0.ffn_gate_exps.weight"].tensor_type == gguf.GGMLQuantizationType.IQ2_XXS
    assert tensors["blk.0.ffn_down_exps.weight"].tensor_type == gguf.GGMLQuantizationType.Q2_K
    assert list(tensors["output.weight"].shape) == [4096, 129280]
    assert "blk.2.indexer.proj.weight" in tensors and "blk.3.indexer.proj.weight" not in tensors  # ratio 4 only
    assert "blk.2.ffn_gate_tid2eid.weight" in tensors and "blk.3.ffn_gate_tid2eid.weight" not in tensors
    tokens = reader.fields["tokenizer.ggml.tokens"]
    assert bytes(tokens.parts[tokens.data[0]]).decode() == phantom_gguf.encode(phantom_gguf.ANSWER)


def _serve(engine: real_engine.RealEngine, *args, lock, log, timeout: float = 30):
    """ds4-server started and waited for until it listens (or exits); the caller stops it."""
    port = free_port()
    proc = subprocess.Popen([str(engine.server), "-c", "256", "--port", str(port), *map(str, args)],
                            stdout=log.open("w"), stderr=subprocess.STDOUT,
                            env={"DS4_LOCK_FILE": str(lock), "PATH": "/usr/bin:/bin"})
    real_engine.wait_for(lambda: LISTENING in log.read_text() or proc.poll() is not None, timeout, 0.1)
    return proc, port


def _chat(port: int, timeout: float) -> dict:
    body = json.dumps({"model": "deepseek-chat", "messages": [{"role": "user", "content": PROMPT}],
                       "max_tokens": 1, "temperature": 0, "thinking": {"type": "disabled"}}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body,
                                     {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return json.loads(answer.read())


def test_each_real_engine_loads_the_phantom_and_answers_the_word(each_engine, phantom, tmp_path):
    # the session's KV cache directory: the CLI scenarios that follow find this prompt's prefill there
    proc, port = _serve(each_engine, "-m", phantom.main, "--kv-disk-dir", phantom.kv, *KV_CACHE_ARGS,
                        lock=tmp_path / "lock", log=tmp_path / "server.log")
    try:
        assert proc.poll() is None, (tmp_path / "server.log").read_text()[-2000:]
        answer = _chat(port, timeout=400)
        assert answer["choices"][0]["message"]["content"] == phantom_gguf.ANSWER, answer
        assert answer["usage"]["prompt_tokens"] == 5  # BOS, User, "Hi", Assistant, </think>: merges keep it short
    finally:
        real_engine.stop(proc, timeout=30)
    assert WORD == "phantom"


@pytest.mark.parametrize("kind, b030961, d8d57664", [
    ("mtp", "ds4: MTP support model loaded", "ds4: MTP support model loaded"),
    ("dspark", "ds4: DSpark support model detected", "ds4: required tensor is missing: mtp.0.hc_head_base.weight"),
])
def test_the_real_engines_classify_the_phantom_support_files(each_engine, phantom, tmp_path, kind, b030961,
                                                             d8d57664):
    log = tmp_path / "server.log"
    proc, _ = _serve(each_engine, "-m", phantom.main, "--mtp", getattr(phantom, kind), lock=tmp_path / "lock",
                     log=log)
    real_engine.stop(proc, timeout=30)
    text = log.read_text()
    expected = b030961 if each_engine.version == "b030961" else d8d57664
    assert expected in text, text[-2000:]
    if kind == "dspark" and each_engine.version == "b030961":
        assert "stages=3" in text and "missing=0 invalid=0 metadata_errors=0" in text, text[-2000:]
    if expected.startswith("ds4: required"):
        assert LISTENING not in text  # 8d57664 refuses a DSpark file: it is no legacy MTP


@pytest.mark.parametrize("ctx", [256, 65536])
def test_each_real_engine_plans_what_the_memory_budget_estimates(each_engine, phantom, tmp_path, ctx):
    """The start log's own plan (b030961: "memory: … = X GiB planned"; both: "context buffers X MiB") read by
    the budget's reader and held against its estimate for the same files and ctx. On a CPU the engine keeps 128
    raw rows and no prefill scratch (the budget's fixed rows and scratch are the CUDA path's, prefill_cap 4096),
    so the estimate is above the plan there; the per-token KV is the same on every backend."""
    from ds4_converge.models import budget

    log = tmp_path / "server.log"
    port = free_port()
    proc = subprocess.Popen([str(each_engine.server), "-c", str(ctx), "--port", str(port), "-m", str(phantom.main)],
                            stdout=log.open("w"), stderr=subprocess.STDOUT,
                            env={"DS4_LOCK_FILE": str(tmp_path / "lock"), "PATH": "/usr/bin:/bin"})
    try:
        real_engine.wait_for(lambda: "context buffers" in log.read_text() or proc.poll() is not None, 60, 0.1)
    finally:
        real_engine.stop(proc, timeout=30)
    text = log.read_text()
    planned = budget.read_plan(text)
    assert planned is not None and planned.context_buffers, text[-2000:]
    assert (planned.total is not None) == (each_engine.version == "b030961"), text[-2000:]
    estimate = budget.estimate(phantom.main.stat().st_size, ctx)
    level, message = budget.against_plan(planned, estimate)
    assert level == "ok", message
    per_token = budget.load_knowledge()["kv"]["bytes_per_token"]
    assert ctx * per_token <= planned.context_buffers <= estimate.kv, message
    if planned.total is not None:  # b030961's plan: the same KV; no resident model on a CPU (nothing is copied)
        assert planned.resident == 0 and abs(planned.total - planned.context_buffers) < 0.01 * GIB, text[-2000:]
