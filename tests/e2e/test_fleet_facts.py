"""What a fleet operator watches of one box: `status --json` and the Prometheus textfile each run writes.

Real runs of the CLI on a simulated box (converge, a bad release that reverts, status, stop); the textfile is
read with prometheus_client's own parser, as a scraper would, and must say what `status --json` says.
"""
from __future__ import annotations

import json
import os

from prometheus_client.parser import text_string_to_metric_families

TEXTFILE = ("metrics", "ds4_converge.prom")


def metrics(box) -> dict:
    """{name: [(labels, value), ...]} of the box's textfile, parsed by prometheus_client."""
    text = box.root.joinpath(*TEXTFILE).read_text()
    found = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge" and family.documentation, family
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def by_command(found: dict, name: str) -> dict:
    return {labels["command"]: value for labels, value in found[name]}


def one(found: dict, name: str):
    (labels, value), = found[name]
    return labels, value


def test_each_run_writes_the_facts_status_shows(box):
    rc, converged = box.converge()
    assert rc == 0, converged
    found = metrics(box)
    labels, _ = one(found, "ds4_converge_info")
    assert labels == {"root": str(box.root), "release": converged["release"], "last_good": converged["release"]}
    assert one(found, "ds4_converge_healthy")[1] == 1 and one(found, "ds4_converge_up")[1] == 1
    assert one(found, "ds4_converge_last_run_success") == ({"root": str(box.root), "command": "converge"}, 1)
    assert "ds4_converge_last_revert_timestamp_seconds" not in found  # never reverted
    # no temporary file is left for the collector to read (it reads *.prom only, the rename is atomic)
    assert sorted(os.listdir(box.root / "metrics")) == ["ds4_converge.prom"]

    with box.edited({"engine.ref": "v0.3.1-crash-at-start"}):
        rc, failed = box.converge()
    assert rc == 1 and failed["reverted"] is True, failed
    rc, status = box.json("status", str(box.spec_path))
    assert rc == 0, status
    assert status["last_revert"]["release"] == converged["release"]
    assert status["last_revert"]["failed"] == failed["switch"]["to"] != converged["release"]
    assert status["last_bench"] is None
    found = metrics(box)
    # a read-only status keeps the failed converge in sight: one series per command
    assert by_command(found, "ds4_converge_last_run_success") == {"converge": 0, "status": 1}
    assert set(by_command(found, "ds4_converge_last_run_timestamp_seconds")) == {"converge", "status"}
    assert one(found, "ds4_converge_info")[0]["release"] == status["release"] == status["last_good"]
    assert one(found, "ds4_converge_healthy")[1] == 1
    revert_labels, revert_at = one(found, "ds4_converge_last_revert_timestamp_seconds")
    assert revert_labels["failed"] == status["last_revert"]["failed"] and revert_at > 0
    last_good_labels, last_good_at = one(found, "ds4_converge_last_good_timestamp_seconds")
    assert last_good_labels["release"] == status["last_good"] and last_good_at > 0

    rc, benched = box.json("bench", str(box.spec_path), "--reps", "1", "--prompt-tokens", "64",
                           "--gen-tokens", "8", "--concurrency", "1")
    assert rc == 0, benched
    status = box.status()
    assert status["last_bench"]["release"] == status["release"] and status["last_bench"]["decode_tps"] > 0
    found = metrics(box)
    assert one(found, "ds4_converge_bench_decode_tokens_per_second")[1] == status["last_bench"]["decode_tps"]

    box.stop()
    found = metrics(box)
    assert one(found, "ds4_converge_up")[1] == 0 and one(found, "ds4_converge_healthy")[1] == 0
    assert by_command(found, "ds4_converge_last_run_success")["stop"] == 1
    assert by_command(found, "ds4_converge_last_run_success")["converge"] == 0
    assert json.loads(json.dumps(found))  # plain data throughout
