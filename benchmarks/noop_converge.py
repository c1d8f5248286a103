"""How long a no-op `ds4-converge SPEC` takes on a converged box, with a small and a multi-GiB model.

Target: a converged box answers in the same time whatever the model size (no rehash, no rebuild, no
restart); tool_speed.py compares that time with Ansible doing the same checks. Runs the real CLI against the
simulated engine; the big model is the tiny synthetic GGUF followed by sparse tensor bytes, with its sha256
declared in the spec so that verification would have to read it all without the digest cache.

    .venv/bin/python benchmarks/noop_converge.py            # updates the section in benchmarks/REPORT.md
    .venv/bin/python benchmarks/noop_converge.py --no-report
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
from report_file import build_sim_repo, free_port, measured_on, write_section  # noqa: E402 - benchmarks/ is on sys.path: run as a script
MODEL = REPO / "engine" / "models" / "tiny-ds4flash.gguf"
HEADING = "## No-op converge time"


def make_model(path: Path, extra_bytes: int) -> str:
    """The synthetic GGUF plus `extra_bytes` of sparse tensor data; returns its sha256 (hashed once, here)."""
    with open(path, "wb") as handle:
        handle.write(MODEL.read_bytes())
        handle.truncate(MODEL.stat().st_size + extra_bytes)
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ds4_converge.cli", *args], capture_output=True, text=True)


def converged(work: Path, repo: Path, name: str, extra_bytes: int) -> dict:
    """A box serving a model of `extra_bytes` more than the tiny one, after its first converge."""
    model = work / f"{name}.gguf"
    sha = make_model(model, extra_bytes)
    spec = {"engine": {"repo": str(repo), "ref": "v0.2.0", "target": "cpu"},
            "model": {"main": {"source": str(model), "sha256": sha}},
            "server": {"port": free_port(), "env": {"DS4_SIM_LOAD_SECONDS": "0.3"}, "stop_wait_s": 20},
            "health": {"deadline_s": 30, "soak_s": 1, "interval_s": 0.2},
            "paths": {"root": str(work / f"root-{name}")}}
    spec_path = work / f"{name}.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    started = time.perf_counter()
    first = cli(str(spec_path), "--json")
    assert first.returncode == 0, first.stdout + first.stderr
    return {"name": name, "spec": spec_path, "size": model.stat().st_size, "first_s": time.perf_counter() - started,
            "full": [], "receipt": []}


def time_noops(boxes: list[dict], runs: int) -> None:
    """Interleaved across the boxes, so that the machine's load weighs on every model size alike: on each box a
    full no-op (it writes the receipt), then one answered from that receipt."""
    for _ in range(runs):
        for box in boxes:
            for kind, extra in (("full", ["--refresh"]), ("receipt", [])):
                started = time.perf_counter()
                proc = cli(str(box["spec"]), "--json", *extra)
                box[kind].append(time.perf_counter() - started)
                document = json.loads(proc.stdout)
                assert proc.returncode == 0 and not document["changed"], proc.stdout
                assert bool(document.get("from_receipt")) == (kind == "receipt"), document


def summary(box: dict) -> dict:
    return {"name": box["name"], "size": box["size"], "first_s": box["first_s"],
            **{f"{kind}_median_s": statistics.median(box[kind]) for kind in ("full", "receipt")},
            **{f"{kind}_max_s": max(box[kind]) for kind in ("full", "receipt")}}


def report(rows: list[dict], runs: int) -> str:
    lines = [HEADING, "",
             f"{measured_on('noop_converge.py')}; wall time of the real CLI with --json (process start "
             f"included) after a first converge: {runs} full no-ops (`--refresh`: spec validated, facts gathered, "
             f"every role planned) interleaved with {runs} answered from the receipt the full one wrote, and the "
             f"two boxes interleaved too.", "",
             "| model | size | first converge (build, hash, start, probe) | full no-op median (max) | "
             "receipt no-op median (max) |", "|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['name']} | {row['size'] / 2**20:,.1f} MiB | {row['first_s']:.2f} s | "
                     f"{row['full_median_s']:.2f} s ({row['full_max_s']:.2f} s) | "
                     f"{row['receipt_median_s']:.2f} s ({row['receipt_max_s']:.2f} s) |")
    lines += ["", "Neither no-op grows with the model: the full plan's digest cache answers for the unchanged file "
              "(device, inode, size, mtime), the release is already built, the engine is not restarted (same "
              "PID) and a tag this root resolved before needs no git; the receipt checks the file's identity "
              "with one stat.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--big-gib", type=float, default=4)
    parser.add_argument("--no-report", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        os.environ["XDG_CACHE_HOME"] = str(work / "user-cache")  # the no-op receipts of this run, not ~/.cache's
        build_sim_repo(work / "ds4-sim.git")
        boxes = []
        try:
            boxes.append(converged(work, work / "ds4-sim.git", "small", 0))
            boxes.append(converged(work, work / "ds4-sim.git", f"{args.big_gib:g}GiB", int(args.big_gib * 2**30)))
            time_noops(boxes, args.runs)
        finally:
            for box in boxes:
                cli("stop", str(box["spec"]))
    text = report([summary(box) for box in boxes], args.runs)
    print(text)
    if not args.no_report:
        write_section(HEADING, text)


if __name__ == "__main__":
    main()
