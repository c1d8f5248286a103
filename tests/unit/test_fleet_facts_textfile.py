"""The Prometheus textfile of cli/fleet_facts.py, read back with prometheus_client's parser."""
from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from ds4_converge.cli import fleet_facts

FACTS = {"root": '/srv/a "b"\\c', "release": "6f2b8dabb4fb-cpu-nocuda", "healthy": True, "last_good": "rel\nx",
         "last_good_at": "2026-12-01T20:00:00+00:00", "last_revert": None,
         "last_bench": {"at": "2026-12-01T20:01:00+00:00", "release": "6f2b8dabb4fb-cpu-nocuda", "decode_tps": 12.5}}


def parsed(text: str) -> dict:
    return {s.name: (s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples}


def test_label_values_survive_quotes_backslashes_and_newlines():
    found = parsed(fleet_facts.metrics_text(FACTS, command="converge", ok=True, now=1000.0))
    labels, value = found["ds4_converge_info"]
    assert labels == {"root": FACTS["root"], "release": FACTS["release"], "last_good": "rel\nx"} and value == 1
    assert found["ds4_converge_bench_decode_tokens_per_second"][1] == 12.5
    assert found["ds4_converge_last_good_timestamp_seconds"][1] == 1796155200.0
    assert found["ds4_converge_last_run_timestamp_seconds"] == ({"root": FACTS["root"], "command": "converge"}, 1000.0)
    assert "ds4_converge_last_revert_timestamp_seconds" not in found


def test_written_by_rename_over_the_old_file(tmp_path):
    path = tmp_path / "metrics" / fleet_facts.TEXTFILE
    fleet_facts.write_textfile(path, FACTS, command="status", ok=False)
    first = path.stat().st_ino
    fleet_facts.write_textfile(path, dict(FACTS, healthy=False), command="status", ok=False)
    assert path.stat().st_ino != first  # a new file renamed over the old one, never rewritten in place
    assert parsed(path.read_text())["ds4_converge_healthy"][1] == 0
    assert [p.name for p in path.parent.iterdir()] == [fleet_facts.TEXTFILE]


def test_the_last_bench_s_gpu_clocks_and_slowdowns_become_series(tmp_path):
    """The clock facts the performance gate reads (health/platform.py), for the throttled-clocks alert."""
    busy = {"index": 0, "sm_mhz": 1200.0, "max_sm_mhz": 3000.0, "pstate": "P2", "reasons": ["software power cap"]}
    record = {"at": "2026-12-01T20:01:00+00:00", "release": "r1",
              "cases": [{"concurrency": 1, "prompt_tokens_target": 8, "decode_tps": {"median": 20.0}}],
              "platform": {"samples": [[busy, {"index": 1, "sm_mhz": 2900.0, "max_sm_mhz": 3000.0, "reasons": []}]],
                           "gpu_processes": []}}
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps(record) + "\n")
    bench = fleet_facts.last_bench(results)
    assert bench["gpus"] == [{"index": 0, "sm_clock_ratio": 0.4, "slowdowns": ["software power cap"]},
                             {"index": 1, "sm_clock_ratio": 0.967, "slowdowns": []}]
    families = {f.name: f.samples for f in text_string_to_metric_families(
        fleet_facts.metrics_text(dict(FACTS, last_bench=bench), command="status", ok=True, now=1.0))}
    assert {(s.labels["gpu"], s.value) for s in families["ds4_converge_bench_gpu_sm_clock_ratio"]} == \
        {("0", 0.4), ("1", 0.967)}
    assert [(s.labels["gpu"], s.labels["reason"]) for s in families["ds4_converge_bench_gpu_slowdown"]] == \
        [("0", "software power cap")]
    # a bench without a GPU (the CPU build): no GPU series at all
    del record["platform"]
    results.write_text(json.dumps(record) + "\n")
    text = fleet_facts.metrics_text(dict(FACTS, last_bench=fleet_facts.last_bench(results)), command="status", ok=True)
    assert "gpu" not in text


def test_the_last_restart_says_which_check_failed_the_signal_and_the_oom_killer():
    restart = {"at": "2026-12-01T20:02:00+00:00", "cause": "the engine was killed by SIGKILL, and no stop was ordered",
               "check": "exit", "signal": "SIGKILL", "oom_killer": "unknown", "action": "restarted"}
    facts = dict(FACTS, watchdog={"incidents": 1, "last_incident": restart, "last_restart": restart})
    labels, value = parsed(fleet_facts.metrics_text(facts, command="status", ok=True, now=1000.0))[
        "ds4_converge_watchdog_last_restart_timestamp_seconds"]
    assert labels == {"root": FACTS["root"], "cause": restart["cause"], "check": "exit", "signal": "SIGKILL",
                      "oom_killer": "unknown"} and value == 1796155320.0
    hung = {"at": restart["at"], "cause": "2 checks failed in a row", "check": "/v1/models", "timeout_s": 2}
    labels = parsed(fleet_facts.metrics_text(dict(FACTS, watchdog={"incidents": 2, "last_incident": hung,
                                                                   "last_restart": hung}), command="status", ok=True)
                    )["ds4_converge_watchdog_last_restart_timestamp_seconds"][0]
    assert labels == {"root": FACTS["root"], "cause": hung["cause"], "check": "/v1/models"}
