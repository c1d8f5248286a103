"""What a fleet operator watches of one box: the same facts for `status --json` and for Prometheus.

A box's facts are the release that serves, whether it is healthy, last good (and when it was recorded), the last
revert (when, what failed, what was put back), the decode tok/s of the last bench and the watchdog's incidents
(how many, and when it last restarted the engine, with the cause). They come from files under
the root only (state.json, logs/, bench/results.jsonl), so writing them costs a run nothing it would notice.

After each run (converge, rollback, status, stop; a no-op confirmed from its receipt too; a run that died
mid-switch once the switch guard restored last good: the guard runs `python -m` this module) the facts are written
as a Prometheus textfile, `ROOT/metrics/ds4_converge.prom`, in the node exporter's textfile collector
convention: the text exposition format, written to a temporary file in the same directory and renamed over the
old one, so the collector never reads half a file (its name does not end in `.prom` until the rename). Point
node_exporter's `--collector.textfile.directory` at `ROOT/metrics` (or link the file into its directory). Every
metric carries the label `root` (one host may serve several roots). The last run's time and success are kept
per command (`ROOT/logs/last-runs.json`), so a read-only `status` never hides that the last converge failed.
"""
from __future__ import annotations

import contextlib
import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

LAST_REVERT = "last-revert.json"  # under ROOT/logs: the last run that put last good back
LAST_RUNS = "last-runs.json"  # under ROOT/logs: {command: {"at": Unix time, "ok": bool}}, the last run of each
TEXTFILE = "ds4_converge.prom"  # under ROOT/metrics


def record_revert(logs: Path, document: dict) -> None:
    """Keep when a run reverted, what failed and what serves again (a converge or rollback report)."""
    if not document.get("reverted"):
        return
    switch = document.get("switch") or {}
    error = (document.get("error") or "").strip().splitlines()
    record = {"at": _now(), "command": document.get("command"), "failed": switch.get("to"),
              "release": document.get("release"), "error": error[0] if error else None}
    _write(logs / LAST_REVERT, json.dumps(record, indent=2) + "\n")


def last_revert(logs: Path) -> dict | None:
    record = _read_json(logs / LAST_REVERT)
    return record if isinstance(record, dict) and isinstance(record.get("at"), str) else None


def last_bench(bench_results: Path) -> dict | None:
    """{"at", "release", "decode_tps"} of the newest bench record (bench, tune or the performance gate)."""
    try:
        with open(bench_results, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 65536))
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            record = json.loads(line)
            decode = _headline(record)
        except (ValueError, KeyError, TypeError, AttributeError):
            continue  # a torn last line, or the tail of a line cut by the seek
        return {"at": record.get("at"), "release": record.get("release"), "decode_tps": decode,
                "gpus": _gpus(record.get("platform"))}
    return None


def _gpus(platform) -> list[dict]:
    """Per GPU while the bench ran: its index, the SM clock's fraction of its maximum while working and the
    slowdown reasons seen (health/platform.py; [] without a GPU or with a record of another shape)."""
    from ds4_converge.health.platform import gpus

    try:
        return [{"index": g["index"], "sm_clock_ratio": g["sm_clock_ratio"], "slowdowns": g["slowdowns"]}
                for g in gpus(platform if isinstance(platform, dict) else None)]
    except (KeyError, TypeError, AttributeError, ValueError, ZeroDivisionError):
        return []


def _headline(record: dict) -> float | None:
    """health.bench.headline without importing the bench (its HTTP client): the no-op path stays lean."""
    singles = [c for c in record["cases"] if c["concurrency"] == 1 and c.get("decode_tps")]
    return min(singles, key=lambda c: c["prompt_tokens_target"])["decode_tps"]["median"] if singles else None


def watchdog_summary(root: Path) -> dict:
    """The watchdog's incidents (service/watchdog.py keeps them in ROOT/logs/incidents.jsonl)."""
    from ds4_converge.core.layout import Layout
    from ds4_converge.service.watchdog import summary

    return summary(Layout(root))


def _seen(incident: dict) -> dict:
    """What an incident saw, as labels: the check that failed, the signal, the OOM killer (when there are)."""
    return {key: str(incident[key]) for key in ("check", "signal", "oom_killer") if incident.get(key)}


def box_facts(root: Path, *, release: str | None, healthy: bool) -> dict:
    """The facts of the box under `root`, with what serves now and whether it is healthy as the run found."""
    state = _read_json(root / "state.json")
    good = state.get("good") if isinstance(state, dict) and isinstance(state.get("good"), list) else []
    last_good = good[-1] if good and isinstance(good[-1], dict) else {}
    return {"root": str(root), "release": release, "healthy": bool(healthy),
            "last_good": last_good.get("release"), "last_good_at": last_good.get("recorded_at") or None,
            "last_revert": last_revert(root / "logs"), "last_bench": last_bench(root / "bench" / "results.jsonl"),
            "watchdog": watchdog_summary(root)}


def after_guard(root: Path) -> None:
    """The textfile once the switch guard recorded the outcome of a run that died mid-switch (last-run.json): that
    command's last run failed, and what serves was restored without a probe (healthy 0 until a run or `status`
    finds it so)."""
    from ds4_converge.core.layout import LAST_RUN

    record = _read_json(root / "logs" / LAST_RUN)
    if isinstance(record, dict) and isinstance(record.get("command"), str):
        after_run(root, {"command": record["command"], "ok": bool(record.get("ok")), "release": record.get("release")},
                  healthy=False)


def after_run(root: Path, document: dict, *, healthy: bool) -> None:
    """The textfile for a run's report (best effort: metrics never fail a run)."""
    with contextlib.suppress(Exception):
        facts = box_facts(root, release=document.get("release"), healthy=healthy)
        command, ok, now = document.get("command") or "converge", bool(document.get("ok")), time.time()
        runs = _read_json(root / "logs" / LAST_RUNS)
        runs = {name: run for name, run in runs.items() if _is_run(run)} if isinstance(runs, dict) else {}
        runs[command] = {"at": round(now, 3), "ok": ok}
        _write(root / "logs" / LAST_RUNS, json.dumps(runs, indent=2, sort_keys=True) + "\n")
        write_textfile(root / "metrics" / TEXTFILE, facts, command=command, ok=ok, now=now, earlier=runs)


def _is_run(run) -> bool:
    return isinstance(run, dict) and isinstance(run.get("at"), (int, float)) and isinstance(run.get("ok"), bool)


def metrics_text(facts: dict, *, command: str, ok: bool, now: float | None = None,
                 earlier: dict | None = None) -> str:
    """The facts in Prometheus's text exposition format (version 0.0.4), as ds4_converge_* gauges; the last
    run of each other command (`earlier`: {command: {"at", "ok"}}) keeps its own series beside this one's."""
    now = time.time() if now is None else now
    runs = {**(earlier or {}), command: {"at": round(now, 3), "ok": ok}}
    root = {"root": facts["root"]}
    families = [
        ("ds4_converge_info", "What serves under this root and its last good release (always 1).",
         [({**root, "release": facts["release"] or "", "last_good": facts["last_good"] or ""}, 1)]),
        ("ds4_converge_up", "1 while a release of ds4-converge serves under this root.",
         [(root, 1 if facts["release"] else 0)]),
        ("ds4_converge_healthy", "1 when the engine answered its probe at the last run.",
         [(root, 1 if facts["healthy"] else 0)]),
        ("ds4_converge_last_good_timestamp_seconds", "When last good passed its probe (Unix time).",
         [({**root, "release": facts["last_good"]}, _epoch(facts["last_good_at"]))] if facts["last_good_at"] else []),
    ]
    revert = facts["last_revert"]
    families.append(("ds4_converge_last_revert_timestamp_seconds",
                     "When a run last put last good back after a failed release (Unix time).",
                     [({**root, "failed": revert.get("failed") or "", "release": revert.get("release") or ""},
                       _epoch(revert["at"]))] if revert and _epoch(revert["at"]) is not None else []))
    watch = facts.get("watchdog") or {}
    families.append(("ds4_converge_watchdog_incidents", "Incidents the watchdog recorded (the newest 200 are kept).",
                     [(root, watch.get("incidents") or 0)]))
    restart = watch.get("last_restart")
    families.append(("ds4_converge_watchdog_last_restart_timestamp_seconds",
                     "When the watchdog last restarted the engine between runs (Unix time), with its cause.",
                     [({**root, "cause": restart.get("cause") or "", **_seen(restart)}, _epoch(restart.get("at")))]
                     if restart else []))
    bench = facts["last_bench"]
    families.append(("ds4_converge_bench_decode_tokens_per_second",
                     "Decode tok/s of one client on the shortest prompt, at the last bench.",
                     [({**root, "release": bench.get("release") or ""}, bench["decode_tps"])]
                     if bench and bench.get("decode_tps") is not None else []))
    gpus = (bench or {}).get("gpus") or []
    families += [
        ("ds4_converge_bench_gpu_sm_clock_ratio",
         "The median SM clock while the GPU worked, as a fraction of its maximum, at the last bench.",
         [({**root, "gpu": g["index"]}, g["sm_clock_ratio"]) for g in gpus]),
        ("ds4_converge_bench_gpu_slowdown", "1 for each clock slowdown reason (power cap, thermal, …) seen on a "
         "GPU at the last bench.", [({**root, "gpu": g["index"], "reason": r}, 1) for g in gpus for r in g["slowdowns"]]),
    ]
    families += [
        ("ds4_converge_last_run_timestamp_seconds", "When the last run of each ds4-converge command ended (Unix time).",
         [({**root, "command": name}, run["at"]) for name, run in sorted(runs.items())]),
        ("ds4_converge_last_run_success", "1 when the last run of each ds4-converge command did what it was asked.",
         [({**root, "command": name}, 1 if run["ok"] else 0) for name, run in sorted(runs.items())]),
    ]
    from ds4_converge.core.textfile import render

    return render(families)


def write_textfile(path: Path, facts: dict, *, command: str, ok: bool, now: float | None = None,
                   earlier: dict | None = None) -> None:
    _write(path, metrics_text(facts, command=command, ok=ok, now=now, earlier=earlier))


def _write(path: Path, text: str) -> None:
    """A temporary file beside the target, renamed over it (not fsynced: a record lost to a power cut is
    rewritten by the next run, and a no-op run stays fast)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def _read_json(path: Path):
    """A small regular file's JSON, never through a link, a FIFO or a device (state.json may be damaged)."""
    from ds4_converge.core.state import read_bounded

    try:
        return json.loads(read_bounded(path))
    except (OSError, ValueError, RecursionError):
        return None


def _epoch(stamp) -> float | None:
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except (TypeError, ValueError):
        return None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


if __name__ == "__main__":  # the switch guard (service/guard.py), after it recorded a run's outcome
    import sys

    after_guard(Path(sys.argv[1]))
