"""The pure parts of bench, tune, the performance gate, drain and warm-up, on fixtures."""
import pytest
import yaml

from ds4_converge.core.state import Deployment
from ds4_converge.orchestrate.tune import Candidate, candidates, write_setting
from ds4_converge.health import gate, warmup
from ds4_converge.health.bench import NEAR_CTX, BenchOptions, Case, cases, config_of, headline, spread
from ds4_converge.service.drain import Drained, parse_metrics
from ds4_converge.spec.loader import load_spec
from ds4_converge.spec.model import Health

SPEC = """\
# my Spark
engine: {repo: /srv/ds4.git, ref: v0.2.0}   # pinned on purpose
model:
  main: /srv/gguf/main.gguf
  mtp: /srv/gguf/mtp.gguf
server:
  port: 8000          # behind the proxy
  speculative: {mode: "off"}
"""


def last_good(decode):
    return Deployment(release="r1", program_conf="x", command=[], endpoint="e", bench={"decode_tps": decode})


def test_gate_floor():
    assert "floor 12" in gate.judge(15.3, Health(min_decode_tps=12), None).message
    with pytest.raises(gate.TooSlow, match=r"decode 11.50 tok/s is below health.min_decode_tps 15: "
                                           r"missed by 3.50 tok/s \(23%\)"):
        gate.judge(11.5, Health(min_decode_tps=15), None)


def test_gate_regression_against_last_good():
    assert "allowed 10%" in gate.judge(14.5, Health(max_regression=0.1), last_good(15.3)).message
    with pytest.raises(gate.TooSlow, match=r"24.8% slower than last good as recorded \(r1: 15.30 tok/s\), more than "
                                           r"health.max_regression 10%: missed by 14.8 points"):
        gate.judge(11.5, Health(max_regression=0.1), last_good(15.3))
    # no figure recorded for last good (it passed before the gate was set): nothing to compare with
    assert "not checked" in gate.judge(1.0, Health(max_regression=0.1), last_good(None)).message
    assert not gate.enabled(Health()) and gate.enabled(Health(max_regression=0.5))


def test_the_baseline_benched_in_this_run_wins_over_the_recorded_one():
    same_run = gate.Baseline("r0", 12.0)
    verdict = gate.judge(11.5, Health(max_regression=0.1), last_good(15.3), baseline=same_run)
    assert "4% below the old engine benched just now (r0: 12.00), allowed 10%" in verdict.message
    with pytest.raises(gate.TooSlow, match=r"slower than the old engine benched just now \(r0: 15.00 tok/s\)"):
        gate.judge(11.5, Health(max_regression=0.1), None, baseline=gate.Baseline("r0", 15.0))


# a GB10 stuck in a low power state, as nvidia-smi --query-gpu=…clocks… reads it while the bench runs (not idle)
LOW_POWER = {"index": 0, "sm_mhz": 208.0, "max_sm_mhz": 3003.0, "power_draw_w": 11.2, "power_limit_w": None,
             "pstate": "P8", "reasons": ["software power cap"]}
BOOSTED = {"index": 0, "sm_mhz": 1980.0, "max_sm_mhz": 1980.0, "power_draw_w": 650.0, "power_limit_w": 700.0,
           "pstate": "P0", "reasons": []}


def test_a_slow_platform_is_named_and_the_release_not_reverted():
    from ds4_converge.health.platform import slow_reasons
    platform = {"samples": [[LOW_POWER], [LOW_POWER]], "gpu_processes": [{"pid": 42, "name": "ds4-server"},
                                                                        {"pid": 777, "name": "python3 train.py"}]}
    reasons = slow_reasons(platform, ours={42})
    assert reasons == ["GPU 0: software power cap", "GPU 0: SM clock 208 of its 3003 MHz while working (p-state P8)",
                       "another process on the GPU: pid 777 (python3 train.py)"]
    verdict = gate.judge(4.0, Health(max_regression=0.1), last_good(15.3), platform_slow=reasons)
    assert verdict.platform_slow and "the platform itself was slow while it was benched (GPU 0: software power " \
        "cap" in verdict.message and "the release is not blamed and not reverted" in verdict.message
    # the same speed on a platform that was not slow is the release's: refused
    assert slow_reasons({"samples": [[BOOSTED]], "gpu_processes": [{"pid": 42, "name": "ds4-server"}]}, {42}) == []
    assert slow_reasons(None) == []
    with pytest.raises(gate.TooSlow):
        gate.judge(4.0, Health(max_regression=0.1), last_good(15.3), platform_slow=[])


def test_an_idle_gpus_low_clock_is_no_slowdown():
    from ds4_converge.health.platform import slow_reasons
    idle = {**BOOSTED, "sm_mhz": 345.0, "reasons": ["idle"]}
    assert slow_reasons({"samples": [[idle]], "gpu_processes": []}) == []


def test_rounds_that_meet_clients_requests_are_redone_and_one_that_never_finds_a_quiet_moment_is_named(monkeypatch):
    from ds4_converge.health import bench

    monkeypatch.setattr(bench, "QUIET_POLL_S", 0)
    # (in flight, ever) as a front door counts them, one reading per call: a request arrives during the first
    # round, the second round is quiet
    readings = iter([(0, 5), (0, 6), (0, 6), (0, 6)])
    alone = bench.Alone()
    runs = []
    assert bench.alone_round(lambda: runs.append(1) or len(runs), lambda: next(readings), alone, "512 x1 round 1") == 2
    assert (alone.checked, alone.redone, alone.contaminated, len(alone.rounds)) == (True, 1, [], 1)
    # clients all the time: redone REDO_ROUNDS times, then kept and named
    busy = iter(range(1000))
    alone = bench.Alone()
    bench.alone_round(lambda: None, lambda: (0, next(busy)), alone, "512 x1 round 2")
    assert alone.redone == bench.REDO_ROUNDS and alone.contaminated == ["512 x1 round 2"]
    # no front door: nobody can tell, the round runs once and says so
    alone = bench.Alone()
    bench.alone_round(lambda: None, None, alone, "r")
    assert not alone.checked and alone.redone == 0 and len(alone.rounds) == 1


def test_the_gate_names_rounds_measured_under_clients_requests_in_a_pass_and_a_refusal():
    baseline = gate.Baseline("r0", 20.0, ("512 x1 round 2",))
    passed = gate.judge(19.5, Health(max_regression=0.1), None, baseline=baseline)
    assert "not the engine alone: the baseline's 512 x1 round 2" in passed.message
    with pytest.raises(gate.TooSlow, match="not the engine alone: the new engine's 512 x1 round 1"):
        gate.judge(10.0, Health(max_regression=0.1), None, baseline=gate.Baseline("r0", 20.0),
                   contaminated=("512 x1 round 1",))
    assert "alone" not in gate.judge(19.5, Health(max_regression=0.1), None, baseline=gate.Baseline("r0", 20.0)).message


def test_metrics_text_and_drain_report():
    text = ("# HELP ds4_requests_inflight Requests being generated.\n# TYPE ds4_requests_inflight gauge\n"
            "ds4_requests_inflight 2\nds4_queue_depth 1\nds4_requests_total{outcome=\"ok\"} 7\n")
    assert parse_metrics(text) == {"ds4_requests_inflight": 2.0, "ds4_queue_depth": 1.0}
    assert Drained(0, 0.0, 0, 300, "metrics").describe() == "idle, nothing to drain"
    assert Drained(1, 3.25, 0, 300, "metrics").describe() == "waited 3.2 s for 1 request(s) in flight to finish"
    assert Drained(2, 300.0, 1, 300, "connections").describe().startswith(
        "cut 1 request(s) still in flight at the 300 s drain deadline")


def test_config_is_read_from_the_engine_command_line():
    assert config_of(["ds4-server", "-m", "/g/main.gguf", "-c", "65536", "--mtp", "/g/m.gguf", "--mtp-draft", "2",
                      "--power", "75"]) == {"speculative": "mtp draft 2", "power": 75, "ctx": 65536,
                                            "model": "main.gguf"}
    assert config_of(["ds4-server", "--model", "x.gguf", "--ctx", "8", "--dspark", "d.gguf", "--ctx", "16"]) == {
        "speculative": "dspark", "power": 100, "ctx": 16, "model": "x.gguf"}  # the last occurrence wins
    assert config_of([])["speculative"] == "off"


def test_bench_cases():
    found = cases(BenchOptions(prompt_tokens=(512, 5500, NEAR_CTX), concurrency=4, gen_tokens=128), 32768)
    assert found == [Case(512), Case(5500), Case(29363, near_ctx=True), Case(512, 4)]
    assert found[2].label == "29363 (near ctx) x1"
    # a length that cannot fit the context is left out; concurrency 1 adds no case
    assert cases(BenchOptions(prompt_tokens=(512, 5500), concurrency=1, gen_tokens=128), 4096) == [Case(512)]


def test_spread_and_headline():
    assert spread([3.0, 1.0, 2.0, None]) == {"median": 2.0, "min": 1.0, "max": 3.0}
    assert spread([None]) is None
    record = {"cases": [{"prompt_tokens_target": 5500, "concurrency": 1, "decode_tps": {"median": 9.0}},
                        {"prompt_tokens_target": 512, "concurrency": 4, "decode_tps": {"median": 7.0}},
                        {"prompt_tokens_target": 512, "concurrency": 1, "decode_tps": {"median": 15.3}}]}
    assert headline(record) == 15.3  # one client, shortest prompt


def test_tune_candidates(tmp_path):
    (tmp_path / "spec.yaml").write_text(SPEC)
    spec = load_spec(tmp_path / "spec.yaml").spec
    assert [c.label for c in candidates(spec)] == ["speculative off", "mtp draft 1", "mtp draft 2", "mtp draft 3",
                                                   "dspark"]
    assert len(candidates(spec, (100, 75))) == 10 and candidates(spec, (75,))[0].label == "speculative off, power 75"
    assert Candidate("mtp", 2, 90).overrides() == ['server.speculative.mode="mtp"', "server.speculative.draft=2",
                                                   "server.power=90"]
    assert Candidate("off").matches(spec) and not Candidate("mtp", 1).matches(spec)


def test_write_setting_keeps_comments_and_layout(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    said = write_setting(path, Candidate("mtp", 2))
    assert said.endswith("server.speculative.mode: mtp, server.speculative.draft: 2")
    written = path.read_text()
    assert written == SPEC.replace('{mode: "off"}', '{mode: "mtp", draft: 2}')
    assert load_spec(path).spec.server.speculative.draft == 2
    write_setting(path, Candidate("off", None, 90))
    data = yaml.safe_load(path.read_text())
    assert data["server"]["speculative"]["mode"] == "off" and data["server"]["power"] == 90
    assert "# behind the proxy" in path.read_text()


def test_write_setting_adds_what_the_spec_lacks(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("engine: {repo: /r, ref: v1}\nmodel: {main: /m.gguf}\n")
    write_setting(path, Candidate("dspark"))
    assert yaml.safe_load(path.read_text())["server"] == {"speculative": {"mode": "dspark"}}


def test_warmup_prompt_files(tmp_path):
    text = tmp_path / "agent.txt"
    text.write_text("You are an agent.")
    body = warmup.load(text, 32768)
    assert body["messages"][0] == {"role": "system", "content": "You are an agent."}
    assert body["stream"] and body["max_tokens"] == 1 and body["thinking"] == {"type": "disabled"}
    request = tmp_path / "agent.json"
    request.write_text('{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}')
    body = warmup.load(request, 32768)
    assert body["tools"] == [{"type": "function"}] and body["max_tokens"] == 1
    request.write_text('{"prompt": "hi"}')
    with pytest.raises(warmup.BadPrompt, match="non-empty messages"):
        warmup.load(request, 32768)
    assert warmup.problems({"health.warmup[0]": text, "health.warmup[1]": tmp_path / "gone.txt"}, 32768) == [
        f"health.warmup[1]: {tmp_path / 'gone.txt'}: no such file"]


def test_a_warmup_prompt_is_read_within_what_ctx_allows(tmp_path):
    """Read again when replayed (the file may have changed since preflight): bounded, never whole; JSON nested deep
    and bytes that are not UTF-8 are a bad prompt (reported), not an unexpected error that reverts."""
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("x" * (100 * warmup.BYTES_PER_TOKEN + 1))
    with pytest.raises(warmup.BadPrompt, match="more than the 3.1 KiB a warm-up prompt for server.ctx 100 may hold"):
        warmup.load(prompt, 100)
    assert warmup.load(prompt, 101)["messages"][0]["content"] == prompt.read_text()
    prompt.write_bytes(b"\xff\xfe")
    with pytest.raises(warmup.BadPrompt, match="not UTF-8 text"):
        warmup.load(prompt, 100)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 2000 + "]" * 2000)
    with pytest.raises(warmup.BadPrompt, match="nested too deep"):
        warmup.load(deep, 32768)
