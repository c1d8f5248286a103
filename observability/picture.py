"""A picture of the dashboard: each panel of the Grafana JSON drawn with matplotlib from a Prometheus's HTTP API,
laid out as Grafana lays it out (gridPos). For docs where no Grafana runs; the panels' own queries, unchanged.

    python observability/picture.py PROMETHEUS_URL DASHBOARD.json OUT.png [--minutes N] [--box REGEX]

tests/observability/test_prometheus.py draws docs/observability-dashboard.png this way (DS4_DASHBOARD_PICTURE).
"""
from __future__ import annotations

import argparse
import json
import re
import time
from datetime import datetime

import requests


def _get(url: str, path: str, **params) -> list[dict]:
    answer = requests.get(f"{url}{path}", params=params, timeout=30)
    answer.raise_for_status()
    return answer.json()["data"]["result"]


def _legend(template: str, labels: dict) -> str:
    text = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template or "")
    return text.strip() or ", ".join(f"{k}={v}" for k, v in labels.items() if k != "__name__")


def draw(url: str, dashboard: dict, out: str, *, minutes: float = 15, box: str = ".*") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    panels = dashboard["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    figure = plt.figure(figsize=(16, rows * 0.42))
    end = time.time()
    start, step = end - minutes * 60, max(1, int(minutes * 60 / 300))
    figure.suptitle(f"{dashboard['title']}: the last {minutes * 60:.0f} s, from {url}", fontsize=11)
    for panel in panels:
        pos = panel["gridPos"]
        left, width = pos["x"] / 24, pos["w"] / 24
        bottom, height = 1 - (pos["y"] + pos["h"]) / rows, pos["h"] / rows
        if panel["type"] == "row":
            figure.text(0.01, bottom + height / 2, panel["title"], fontsize=11, weight="bold", va="center")
            continue
        axes = figure.add_axes((left + 0.035, bottom + 0.02, width - 0.05, height - 0.05))
        axes.set_title(panel["title"], fontsize=9, loc="left")
        queries = [(t["expr"].replace("$box", box), t.get("legendFormat", "")) for t in panel.get("targets", [])]
        if panel["type"] == "timeseries":
            for expr, legend in queries:
                for series in _get(url, "/api/v1/query_range", query=expr, start=start, end=end, step=step):
                    stamps = [datetime.fromtimestamp(float(t)) for t, _ in series["values"]]
                    axes.plot(stamps, [float(v) for _, v in series["values"]], linewidth=1.2,
                              label=_legend(legend, series["metric"]))
            axes.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
            axes.tick_params(labelsize=7)
            if axes.lines:
                axes.legend(fontsize=6, loc="upper left")
        else:  # table and stat: the instant values, as text
            axes.axis("off")
            lines = []
            for expr, legend in queries:
                for series in _get(url, "/api/v1/query", query=expr, time=end):
                    value = float(series["value"][1])
                    lines.append(f"{_legend(legend, series['metric'])}:  {value:.6g}")
            axes.text(0, 1, "\n".join(lines[:14]) or "(no data)", fontsize=7, va="top", family="monospace")
    figure.savefig(out, dpi=90)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("prometheus")
    parser.add_argument("dashboard")
    parser.add_argument("out")
    parser.add_argument("--minutes", type=float, default=15)
    parser.add_argument("--box", default=".*")
    args = parser.parse_args()
    with open(args.dashboard) as handle:
        draw(args.prometheus, json.load(handle), args.out, minutes=args.minutes, box=args.box)


if __name__ == "__main__":
    main()
