"""Bench and tune results for people: tables, and a plot for those who would rather look."""
from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table


class PlotUnavailable(Exception):
    pass


def _spread(value: dict | None, fmt: str = "{:.2f}") -> str:
    """median ±half the range, compact enough for an 80-column table"""
    if not value:
        return "-"
    half = (value["max"] - value["min"]) / 2
    return fmt.format(value["median"]) + (f"±{fmt.format(half)}" if fmt.format(half) != fmt.format(0) else "")


def bench_table(record: dict, out: Console) -> None:
    config = record["config"]
    out.print(f"release {record['release']}, speculative {config['speculative']}, power {config['power']}, "
              f"ctx {config['ctx']}: {record['reps']} round(s) per case, {record['gen_tokens']} tokens per answer; "
              "median ±half the range; tok/s per client, and all clients together", markup=False)
    engine_of = [case.get("engine") or {} for case in record["cases"]]
    columns = {
        "case": [escape(c["case"]) for c in record["cases"]],
        "prompt": [str(c["prompt_tokens"]) + (f" ({c['cached_tokens']} cached)" if c["cached_tokens"] else "")
                   for c in record["cases"]],
        "TTFT s": [_spread(c["ttft_s"]) for c in record["cases"]],
        "prefill t/s": [_spread(c["prefill_tps"], "{:.0f}") for c in record["cases"]],
        "decode t/s": [_spread(c["decode_tps"], "{:.1f}") for c in record["cases"]],
        "together": [_spread(c["aggregate_tps"], "{:.1f}") if c["concurrency"] > 1 else "-" for c in record["cases"]],
        "engine t/s": [_spread(e.get("decode_tps"), "{:.1f}") for e in engine_of],
        "accept": [_spread(e.get("spec_accept_rate")) for e in engine_of],
        "tok/step": [_spread(e.get("tok_per_step")) for e in engine_of],
    }
    table = Table(box=None, header_style="bold")
    shown = {name: cells for name, cells in columns.items() if any(cell != "-" for cell in cells)}
    for name in shown:
        table.add_column(name, justify="left" if name == "case" else "right", no_wrap=True)
    for row in zip(*shown.values()):
        table.add_row(*row)
    out.print(table)
    stats = record.get("stats")
    if stats:
        out.print("engine /v1/stats: " + escape(", ".join(f"{k} {v}" for k, v in stats.items() if v is not None)),
                  style="dim")


def tune_table(document: dict, out: Console) -> None:
    table = Table(box=None, header_style="bold")
    for column in ("rank", "setting", "decode tok/s", "TTFT s", "accept", "status"):
        table.add_column(column, justify="right" if column in ("rank", "decode tok/s", "TTFT s", "accept") else "left")
    rank = 0
    for trial in document["ranked"]:
        ok = trial["status"] == "ok"
        rank += ok
        decode = trial["decode_tps"]
        table.add_row(str(rank) if ok else "", escape(trial["setting"]), f"{decode:.2f}" if decode else "-",
                      _spread(trial["ttft_s"]), f"{trial['spec_accept_rate']:.2f}" if trial["spec_accept_rate"] else "-",
                      "ok" if ok else escape(f"{trial['status']}: {trial['reason']}"))
    out.print(table)
    if document["winner"]:
        out.print(f"fastest: {escape(document['winner'])}")
    if document["written"]:
        out.print(f"written: {escape(document['written'])}")
    out.print(f"the box ends on {escape(document['ended_on'])}")
    if document["error"]:
        out.print(f"[bold red]FAILED[/]: {escape(document['error'])}")


def plot(records: list[dict], path: Path) -> None:
    """Decode tok/s and TTFT per case, one bar per release and configuration (the latest record of each)."""
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailable("--plot needs matplotlib: pip install 'ds4-converge[plot]'") from None
    matplotlib.use("Agg")  # files only, no display
    from matplotlib import pyplot

    if path.suffix.lower() not in (".png", ".svg"):
        raise PlotUnavailable(f"--plot {path}: use a .png or .svg file name")
    cases = list(dict.fromkeys(c["case"] for r in records for c in r["cases"]))
    figure, axes = pyplot.subplots(1, 2, figsize=(max(8, 2.2 * len(cases)) * 1.6, 4.8))
    width = 0.8 / max(len(records), 1)
    for index, record in enumerate(records):
        by_case = {c["case"]: c for c in record["cases"]}
        for axis, metric in zip(axes, ("decode_tps", "ttft_s")):
            values = [(by_case.get(c) or {}).get(metric) or {"median": 0, "min": 0, "max": 0} for c in cases]
            xs = [i + index * width for i in range(len(cases))]
            medians = [v["median"] for v in values]
            errors = [[v["median"] - v["min"] for v in values], [v["max"] - v["median"] for v in values]]
            axis.bar(xs, medians, width, yerr=errors, capsize=3, label=record["key"])
    for axis, title in zip(axes, ("decode tok/s per client (median, min–max)", "time to first token, s")):
        axis.set_title(title)
        axis.set_xticks([i + width * (len(records) - 1) / 2 for i in range(len(cases))], cases, rotation=15)
    axes[0].legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)
