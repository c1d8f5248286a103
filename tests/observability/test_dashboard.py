"""The Grafana dashboard the collection ships is generated from observability/dashboard.py
(grafana-foundation-sdk): the checked-in JSON is what the code builds, and every panel queries Prometheus.
Whether each query finds series is tests/observability/test_prometheus.py's business (a real Prometheus)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).parents[2]
SHIPPED = REPO / "roles" / "ds4_converge" / "files" / "grafana" / "ds4-converge-dashboard.json"


def generator():
    spec = importlib.util.spec_from_file_location("dashboard", REPO / "observability" / "dashboard.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_dashboard_is_what_the_code_builds():
    assert json.loads(SHIPPED.read_text()) == generator().build(), "stale: run `make dashboard`"


def test_every_panel_asks_the_chosen_prometheus_for_the_chosen_boxes():
    document = json.loads(SHIPPED.read_text())
    assert [v["name"] for v in document["templating"]["list"]] == ["datasource", "box"]
    panels = [p for p in document["panels"] if p["type"] != "row"]
    titles = {p["title"] for p in panels}
    assert {"Requests per release", "Errors per release (5xx)", "Latency per release", "Held requests",
            "Decode tokens/s at the last bench", "Watchdog incidents", "Last run per box"} <= titles
    for panel in panels:
        assert panel["targets"] and panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"
            assert 'box=~"$box"' in target["expr"] or "ALERTS" in target["expr"], (panel["title"], target["expr"])
