"""The Grafana dashboard of a ds4-converge fleet, built in code with Grafana's own grafana-foundation-sdk.

    python observability/dashboard.py > roles/ds4_converge/files/grafana/ds4-converge-dashboard.json   # make dashboard

Every query reads the series the scrape config of the role names (jobs ds4_front, ds4_node; labels box, proxy) and
the rules beside it record (per release: HAProxy's slot series joined on ds4_converge_front_slot_info);
tests/observability/test_prometheus.py asks a real Prometheus each one, through an upgrade and a revert, and
finds series for all of them. docs/observability.md says what each panel shows.
"""
from __future__ import annotations

import json
import sys

from grafana_foundation_sdk.builders import dashboard, prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableRefresh
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

UID = "ds4-converge"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
BOX = 'box=~"$box"'

# (row, [(kind, title, unit, description, [(expr, legend)])]), top to bottom; each panel half a row wide
PANELS = [
    ("Per release (the front door's slots, joined on the release each serves)", [
        ("timeseries", "Requests per release", "reqps",
         "Answers per second through each box's front door, by release and HTTP class: during a canary, the new "
         "release's share and its errors beside the old one's.",
         [(f'sum by (release, code) (box_release:haproxy_server_http_responses:rate1m{{{BOX}, code=~"2xx|4xx|5xx"}})',
           "{{release}} {{code}}")]),
        ("timeseries", "Errors per release (5xx)", "reqps",
         "Server errors per second by release (a held request that waits past front.hold_s is one).",
         [(f'sum by (release) (box_release:haproxy_server_http_responses:rate1m{{{BOX}, code="5xx"}})',
           "{{release}}")]),
        ("timeseries", "Latency per release", "s",
         "HAProxy's average over each slot's last 1024 requests (HAProxy 2.6 keeps no histogram, so no "
         "quantiles): total time, and time to the response's first byte.",
         [(f'max by (release) (box_release:haproxy_server_total_time_average_seconds:max{{{BOX}}})',
           "{{release}} total"),
          (f'max by (release) (box_release:haproxy_server_response_time_average_seconds:max{{{BOX}}})',
           "{{release}} first byte")]),
        ("timeseries", "Bytes out per release", "Bps",
         "Bytes per second sent to clients by each release: tokens streamed, roughly.",
         [(f'sum by (release) (box_release:haproxy_server_bytes_out:rate1m{{{BOX}}})', "{{release}}")]),
        ("table", "Release per slot", "none",
         "Which release each engine slot of each front door serves (or served last): the map the per-release "
         "numbers join on, as status --json shows it (front.slots).",
         [(f'max by (box, server, port, release) (ds4_converge_front_slot_info{{{BOX}}})', "")]),
    ]),
    ("The front door", [
        ("timeseries", "Held requests", "short",
         "While a switch stops the serving engine, the front door's hold server is in service and requests wait "
         "(retried every 250 ms) up to front.hold_s: the hold (1/0), the requests waiting, and retries per second.",
         [(f'max by (box) (haproxy_server_status{{job="ds4_front", {BOX}, server="hold", state="UP"}})',
           "{{box}} holding"),
          (f'sum by (box) (haproxy_backend_current_sessions{{job="ds4_front", {BOX}}})', "{{box}} in flight"),
          (f'sum by (box) (rate(haproxy_backend_retry_warnings_total{{job="ds4_front", {BOX}}}[1m]))',
           "{{box}} retries/s")]),
        ("timeseries", "Alerts", "short",
         "ds4-converge's alerts (roles/ds4_converge/files/prometheus), pending and firing.",
         [(f'count by (alertname, alertstate) (ALERTS{{alertname=~"Ds4.*"}})', "{{alertname}} {{alertstate}}")]),
    ]),
    ("Boxes (ds4-converge's textfile)", [
        ("timeseries", "Decode tokens/s at the last bench", "short",
         "One client, the shortest prompt, at the newest bench record of each box: ds4-converge bench, tune, or "
         "the performance gate of a switch.",
         [(f'ds4_converge_bench_decode_tokens_per_second{{{BOX}}}', "{{box}} {{release}}")]),
        ("timeseries", "Watchdog incidents", "short",
         "Incidents the watchdog recorded between runs (the newest 200 are kept): a step is a new one.",
         [(f'ds4_converge_watchdog_incidents{{{BOX}}}', "{{box}}")]),
        ("table", "Last run per box", "s",
         "How long ago each ds4-converge command last ran on each box, and whether it did what it was asked (1).",
         [(f'time() - max by (box, command) (ds4_converge_last_run_timestamp_seconds{{{BOX}}})', ""),
          (f'max by (box, command) (ds4_converge_last_run_success{{{BOX}}})', "")]),
        ("stat", "Healthy", "none",
         "1 when the engine answered its probe at the box's last run.",
         [(f'ds4_converge_healthy{{{BOX}}}', "{{box}}")]),
    ]),
]

KINDS = {"timeseries": timeseries.Panel, "table": table.Panel, "stat": stat.Panel}


def _panel(kind: str, title: str, unit: str, description: str, queries: list[tuple[str, str]]):
    panel = KINDS[kind]().title(title).description(description).unit(unit).datasource(DATASOURCE).height(8).span(12)
    for ref, (expr, legend) in zip("ABCDEFGH", queries):
        query = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(DATASOURCE)
        if kind == "table":
            query = query.instant().format(PromQueryFormat.TABLE)
        elif legend:
            query = query.legend_format(legend)
        panel = panel.with_target(query)
    return panel


def build() -> dict:
    board = (dashboard.Dashboard("ds4-converge").uid(UID).tags(["ds4-converge", "haproxy"]).time("now-6h", "now")
             .refresh("30s").timezone("browser")
             .description("A ds4-converge fleet: requests, errors and latency per release at each box's front door, "
                          "held requests, the boxes' benches, watchdog incidents and last runs.")
             .with_variable(dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
             .with_variable(dashboard.QueryVariable("box").label("Box").datasource(DATASOURCE)
                            .query("label_values(ds4_converge_up, box)").refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
                            .multi(True).include_all(True).all_value(".*")))
    for row, panels in PANELS:
        board = board.with_row(dashboard.Row(row))
        for spec in panels:
            board = board.with_panel(_panel(*spec))
    return json.loads(JSONEncoder(sort_keys=True, indent=2).encode(board.build()))


def queries(document: dict) -> list[tuple[str, str]]:
    """(panel title, expression) of every query of a built dashboard (the JSON as Grafana reads it)."""
    return [(panel["title"], target["expr"]) for panel in document["panels"] if panel.get("type") != "row"
            for target in panel.get("targets", [])]


def main() -> None:
    sys.stdout.write(json.dumps(build(), indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
