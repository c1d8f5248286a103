"""Fast, not just alive: tune picks the fastest setting, the performance gate reverts a slow release, a request
in flight survives a restart, warm-up prompts lower the first request's time to first token.

Speeds come from the simulated engine's environment (engine/sim/ds4_speed.py), run faster than life with
DS4_SIM_TIME_SCALE; every assertion compares settings with each other by a wide margin."""
import json
import os
import threading
import time

import pytest
import requests
import yaml

from boxes import REPO, report_document

MODELS = REPO / "engine" / "models"
FAST = {"DS4_SIM_DECODE_TOK_S": "10", "DS4_SIM_PREFILL_TOK_S": "700", "DS4_SIM_TIME_SCALE": "0.2"}


def with_drafters(box, env):
    box.spec["model"]["mtp"] = str(MODELS / "tiny-mtp.gguf")
    box.spec["model"]["dspark"] = str(MODELS / "tiny-dspark-legacy.gguf")
    box.spec["server"]["env"].update({**FAST, **env})
    box.spec["health"]["soak_s"] = 0.5
    box.write()


def tune(box, *extra):
    proc = box.cli("tune", str(box.spec_path), "--json", "--reps", "2", "--gen-tokens", "48", *extra, timeout=400)
    return proc.returncode, report_document(proc)["tune"]


def running_command(box) -> list[str]:
    return json.loads((box.root / "state.json").read_text())["current"]["command"]


def test_tune_picks_speculation_when_it_helps_and_writes_it_keeping_comments(box):
    # MTP accepted 95 % of the time: deeper drafts win; the DSpark drafter here is nearly always wrong
    with_drafters(box, {"DS4_SIM_MTP_ACCEPT": "0.95", "DS4_SIM_MTP_OVERHEAD": "0.1",
                        "DS4_SIM_DSPARK_ACCEPT": "0.05"})
    box.spec_path.write_text("# hand-written: keep this comment\n" + box.spec_path.read_text())
    assert box.converge()[0] == 0
    rc, document = tune(box, "--write")
    assert rc == 0, document
    ranked = document["ranked"]
    assert [t["status"] for t in ranked] == ["ok"] * 5, ranked
    assert document["winner"] == ranked[0]["setting"] == "mtp draft 3", ranked
    assert ranked[-1]["setting"] == "dspark", "a drafter that is nearly always wrong is slower than no drafter"
    off = next(t for t in ranked if t["setting"] == "speculative off")
    assert ranked[0]["decode_tps"] > 1.5 * off["decode_tps"]
    written = box.spec_path.read_text()
    assert written.startswith("# hand-written: keep this comment\n")
    assert yaml.safe_load(written)["server"]["speculative"] == {"mode": "mtp", "draft": 3}
    command = running_command(box)
    assert "--mtp" in command and command[command.index("--mtp-draft") + 1] == "3", "the box ends on the winner"
    assert box.status()["healthy"]


def test_tune_keeps_speculation_off_when_it_hurts_and_ends_where_it_started(box):
    # the field's abliterated model: drafts are rarely accepted, so speculation only costs
    with_drafters(box, {"DS4_SIM_MTP_ACCEPT": "0.1", "DS4_SIM_MTP_OVERHEAD": "0.3"})
    del box.spec["model"]["dspark"]
    box.write()
    assert box.converge()[0] == 0
    before_spec, before_state = box.spec_path.read_text(), json.loads((box.root / "state.json").read_text())
    rc, document = tune(box)
    assert rc == 0, document
    assert document["winner"] == "speculative off" and not document["written"], document
    ranked = {t["setting"]: t for t in document["ranked"]}
    assert ranked["dspark"]["status"] == "skipped" and "no model.dspark" in ranked["dspark"]["reason"]
    assert all(ranked[f"mtp draft {d}"]["decode_tps"] < ranked["speculative off"]["decode_tps"] for d in (1, 2, 3))
    assert box.spec_path.read_text() == before_spec
    after_state = json.loads((box.root / "state.json").read_text())
    assert "--no-spec" in after_state["current"]["command"] and "--mtp" not in after_state["current"]["command"]
    assert [g["program_conf"] for g in after_state["good"]] == [g["program_conf"] for g in before_state["good"]], \
        "the trials are not left in the last-good history"
    records = [json.loads(line) for line in (box.root / "bench" / "results.jsonl").read_text().splitlines()]
    assert {r["config"]["speculative"] for r in records if r["kind"] == "tune"} == {
        "off", "mtp draft 1", "mtp draft 2", "mtp draft 3"}


@pytest.mark.parametrize("gate, change, missed", [
    ({"health.min_decode_tps": 30}, {"server.power": 40}, "below health.min_decode_tps 30: missed by"),
    ({"health.max_regression": 0.2}, {"server.power": 50}, "more than health.max_regression 20%: missed by"),
])
def test_the_performance_gate_reverts_a_slow_release(box, gate, change, missed):
    # 10 tok/s at time scale 0.2 measures ~50 tok/s; power 40 (a recipe's --power) ~20, power 50 ~25
    box.spec["server"]["env"].update(FAST)
    box.write()
    with box.edited(gate):
        rc, first = box.converge()
        assert rc == 0, first
        probe = next(r for r in first["roles"] if r["name"] == "probe")
        assert "performance gate passed" in probe["msg"], probe
        before = box.status()
        with box.edited(change):
            rc, document = box.converge()
    assert rc == 1 and document["reverted"], document
    assert "is too slow" in document["error"] and missed in document["error"], document["error"]
    after = box.status()
    assert after["healthy"] and after["release"] == before["release"] and after["pid"] != before["pid"]
    assert "--power" not in running_command(box)


# a GB10 stuck in a low power state while it works, as `nvidia-smi --query-gpu=…clocks…` prints it; no tenant
LOW_POWER_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=index,clocks*) echo "0, 208, 3003, 11.20, [N/A], P8, 0x0000000000000004" ;;
  --query-compute-apps=*) ;;
  *) exit 6 ;;
esac
"""


def test_a_good_release_on_a_slowed_box_is_not_reverted_and_the_platform_is_named(box, tmp_path):
    """The baseline is the old engine benched just before the switch; the box then slows (the sim decodes at half
    speed, nvidia-smi shows a power cap and clocks held at P8): the gate says so instead of blaming the release."""
    box.spec["server"]["env"].update(FAST)
    box.spec["health"]["max_regression"] = 0.2
    box.write()
    rc, first = box.converge()
    assert rc == 0, first
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(LOW_POWER_SMI)
    smi.chmod(0o755)
    slowed = {"PATH": f"{smi.parent}:{os.environ['PATH']}"}
    with box.edited({"server.env.DS4_SIM_DECODE_TOK_S": "5"}):
        proc = box.cli(str(box.spec_path), "--json", env=slowed)
    document = report_document(proc)
    assert proc.returncode == 0 and not document["reverted"], document
    probe = next(r for r in document["roles"] if r["name"] == "probe")
    assert "slower than the old engine benched just now" in probe["msg"], probe
    assert "the platform itself was slow while it was benched (GPU 0: software power cap; GPU 0: SM clock 208 of " \
           "its 3003 MHz while working (p-state P8))" in probe["msg"], probe
    assert "the release is not blamed and not reverted" in probe["msg"], probe
    records = [json.loads(line) for line in (box.root / "bench" / "results.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in records[-2:]] == ["baseline", "gate"], records
    assert records[-1]["platform"]["samples"][0][0]["pstate"] == "P8"


def _stream_count(url, n, got):
    """Stream a 'count to n' answer into got: its content pieces, then the finish reason, [DONE] or <cut>."""
    try:
        with requests.post(f"{url}/v1/chat/completions", stream=True, timeout=60, json={
                "model": "deepseek-chat", "stream": True, "max_tokens": n + 5,
                "messages": [{"role": "user", "content": f"Count from 1 to {n}."}]}) as response:
            for line in response.iter_lines(chunk_size=1):
                if not line.startswith(b"data: "):
                    continue
                if line == b"data: [DONE]":
                    got.append("[DONE]")
                    break
                choice = json.loads(line[6:])["choices"][0]
                if choice["delta"].get("content"):
                    got.append(choice["delta"]["content"])
                if choice.get("finish_reason"):
                    got.append(f"finish={choice['finish_reason']}")
    except requests.RequestException:
        got.append("<cut>")


def _restart_while_streaming(box) -> tuple[int, dict, list[str]]:
    """A ctx change (a restart) while a 150-number answer streams: (exit code, report, what the client got)."""
    got: list[str] = []
    # ~12 s of answer: longer than a converge takes to reach the stop, even on a busy machine
    client = threading.Thread(target=_stream_count, args=(box.endpoint, 150, got))
    client.start()
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        time.sleep(0.05)
    assert got, "the answer started"
    rc, document = box.converge("--set", "server.ctx=65536")
    client.join(30)
    return rc, document, got


@pytest.mark.parametrize("ref", ["v0.1.0", "v0.2.0"])  # upstream (connections on the port), fork (/metrics)
def test_a_streamed_request_in_flight_during_a_restart_completes(box, ref):
    box.spec["engine"]["ref"] = ref
    box.spec["server"]["env"].update({"DS4_SIM_DECODE_TOK_S": "12"})
    box.write()
    assert box.converge()[0] == 0
    rc, document, got = _restart_while_streaming(box)
    assert rc == 0, document
    assert got[-2:] == ["finish=stop", "[DONE]"] and "".join(got[:-2]).split() == [str(i) for i in range(1, 151)]
    service = next(r for r in document["roles"] if r["name"] == "service")
    assert "for 1 request(s) in flight to finish" in service["msg"], service


def test_without_drain_a_restart_cuts_the_answer(box):
    box.spec["server"].update({"drain_s": 0})
    box.spec["server"]["env"].update({"DS4_SIM_DECODE_TOK_S": "12"})
    box.write()
    assert box.converge()[0] == 0
    rc, document, got = _restart_while_streaming(box)
    assert rc == 0, document
    assert "[DONE]" not in got and len(got) < 150, got
    service = next(r for r in document["roles"] if r["name"] == "service")
    assert "cut 1 request(s) still in flight at the 0 s drain deadline" in service["msg"], service


def _ttft(url, system, question):
    """Seconds to the first content chunk of a streamed answer, and the cached prompt tokens."""
    started = time.monotonic()
    first, cached = None, None
    with requests.post(f"{url}/v1/chat/completions", stream=True, timeout=60, json={
            "model": "deepseek-chat", "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}]}) as response:
        for line in response.iter_lines(chunk_size=1):
            if not line.startswith(b"data: {"):
                continue
            chunk = json.loads(line[6:])
            if first is None and any(c["delta"].get("content") for c in chunk["choices"]):
                first = time.monotonic() - started
            if chunk.get("usage"):
                cached = chunk["usage"]["prompt_tokens_details"]["cached_tokens"]
    return first, cached


def test_warm_up_lowers_the_first_requests_ttft(box, tmp_path):
    agent = tmp_path / "agent-system-prompt.txt"
    agent.write_text("You are a coding agent. " + " ".join(f"Rule {i}: be careful." for i in range(500)))
    box.spec["server"]["env"].update({"DS4_SIM_PREFILL_TOK_S": "1500"})  # ~3000 tokens: 2 s cold
    box.write()
    assert box.converge()[0] == 0
    rc, cold_run = box.converge("--set", "server.ctx=65536")  # a restart without warm-up
    assert rc == 0, cold_run
    cold_ttft, cold_cached = _ttft(box.endpoint, agent.read_text(), "What is the capital of France?")

    with box.edited({"health.warmup": [str(agent)]}):
        rc, warm_run = box.converge("--set", "server.ctx=32768")  # a restart with warm-up
    assert rc == 0, warm_run
    warm_ttft, warm_cached = _ttft(box.endpoint, agent.read_text(), "What is the capital of France?")

    assert cold_cached == 0 and warm_cached > 2500, (cold_cached, warm_cached)
    assert warm_ttft < cold_ttft / 4, (warm_ttft, cold_ttft)
    probe = next(r for r in warm_run["roles"] if r["name"] == "probe")
    said = probe["msg"].split("warm-up agent-system-prompt.txt")[1]
    cold_s, warm_s = (float(part.split(" s ")[0].split()[-1]) for part in said.split(",")[:2])
    assert cold_s > 4 * warm_s, probe["msg"]  # the report shows the same: cold, then warm


def test_a_missing_warm_up_file_is_refused_before_anything_changes(box, tmp_path):
    box.spec["health"]["warmup"] = [str(tmp_path / "nowhere.txt")]
    box.write()
    rc, document = box.converge()
    assert rc == 1 and not document["reverted"]
    assert "health.warmup" in document["error"] and "nowhere.txt: no such file" in document["error"], document
    assert not (box.root / "state.json").exists()


def test_bench_measures_the_running_engine_and_keeps_the_results(box, tmp_path):
    box.spec["server"]["env"].update(FAST)
    box.spec["server"]["ctx"] = 8192
    box.write()
    rc, converged = box.converge()
    assert rc == 0, converged
    proc = box.cli("bench", str(box.spec_path), "--json", "--prompt-tokens", "300,ctx", "--concurrency", "2",
                   "--reps", "2", "--gen-tokens", "24")
    assert proc.returncode == 0, proc.stderr
    document = report_document(proc)
    assert document["command"] == "bench" and document["ok"] and document["release"] == converged["release"]
    record = document["bench"]
    assert record["release"] == converged["release"] and record["config"]["speculative"] == "off"
    assert [c["case"] for c in record["cases"]] == ["300 x1", "7348 (near ctx) x1", "300 x2"]
    for case in record["cases"]:
        assert abs(case["prompt_tokens"] - case["prompt_tokens_target"]) < 0.1 * case["prompt_tokens_target"]
        assert case["cached_tokens"] == 0, "every request has a fresh prefix: the KV cache must not flatter it"
        assert case["completion_tokens"] == 24 and case["decode_tps"]["median"] > 0
        assert case["engine"]["decode_tps"]["median"] > 0  # the fork's own timings
    near_ctx, short = record["cases"][1], record["cases"][0]
    assert near_ctx["ttft_s"]["median"] > 5 * short["ttft_s"]["median"]  # prefill grows with the prompt
    assert record["stats"]["ctx"] == 8192
    kept = (box.root / "bench" / "results.jsonl").read_text().splitlines()
    assert json.loads(kept[-1])["key"] == f"{converged['release']} | speculative off, power 100"

    plot = tmp_path / "bench.svg"
    proc = box.cli("bench", str(box.spec_path), "--prompt-tokens", "300", "--concurrency", "1", "--reps", "1",
                   "--gen-tokens", "8", "--plot", str(plot))
    assert proc.returncode == 0, proc.stderr
    assert "decode t/s" in proc.stdout and "300 x1" in proc.stdout
    assert plot.read_text().lstrip().startswith("<?xml") and "<svg" in plot.read_text()


def test_bench_needs_a_serving_engine(box):
    proc = box.cli("bench", str(box.spec_path))
    assert proc.returncode == 1 and "never converged here" in proc.stderr, proc.stderr
