"""How fast the tool itself is: a no-op converge of spec/examples/sim.yaml against Ansible doing the same checks,
what the no-op path imports, and what a restart costs beyond the engine's own load and soak.

Everything is measured side by side in one run, interleaved (tool, Ansible, tool, …), so that the machine's load
at that moment weighs on both alike; the ratios are what to read on a shared machine.

  no-op      `ds4-converge spec/examples/sim.yaml` on a converged box (text output, and --json), and an
             ansible-playbook on localhost doing the three checks a no-op needs (stat the model file, GET
             /v1/models, a command asking git what the pinned tag is);
  imports    `python -X importtime` of the no-op run: which heavy libraries it loads;
  restart    runs that change server.ctx, so each restarts the engine: wall time minus the engine's load
             (measured on its own: spawn to /v1/models answering) minus health.soak_s; with a warm process
             (DS4_CONVERGE_WARM=1, cli/warm.py) and without one (=0), interleaved.

    .venv/bin/python benchmarks/tool_speed.py                   # updates its sections in benchmarks/REPORT.md
    .venv/bin/python benchmarks/tool_speed.py --runs 21 --restarts 7 --baseline /tmp/old-checkout --no-report

--baseline DIR also times the no-op of another checkout of this repository (e.g. `git archive main | tar -x -C
DIR`), with the same venv, interleaved with the rest.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
from report_file import free_port, write_section  # noqa: E402 - benchmarks/ is on sys.path: run as a script
SPEC = REPO / "spec" / "examples" / "sim.yaml"
BIN = Path(sys.executable).parent
# the name the installed ds4-converge script runs as: the supervisord config renders the interpreter's path, and
# a baseline checkout (which renders whatever name started it) must render the same one, or each run is a change
PYTHON = str(BIN / "python3") if (BIN / "python3").exists() else sys.executable
HEAVY = ("numpy", "gguf", "huggingface_hub", "requests", "urllib3", "rich", "jinja2", "supervisor.xmlrpc",
         "tenacity", "pydantic", "ruamel.yaml")
NOOP_HEADING = "## Tool speed: no-op converge against Ansible"
RESTART_HEADING = "## Tool speed: restart overhead"

PLAYBOOK = """\
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: the model file is there
      ansible.builtin.stat:
        path: {model}
        get_checksum: false
      register: model
      failed_when: not model.stat.exists
    - name: the engine answers /v1/models
      ansible.builtin.uri:
        url: http://127.0.0.1:{port}/v1/models
    - name: the pinned tag resolves
      ansible.builtin.command: git -C {mirror} rev-parse v0.2.0
      changed_when: false
"""


def timed(argv: list[str], env: dict | None = None, check_json: bool = False, cwd: Path | None = None) -> float:
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    if check_json and json.loads(proc.stdout)["changed"]:
        raise SystemExit(f"not a no-op: {proc.stdout}")
    return elapsed


class Box:
    def __init__(self, work: Path):
        self.root, self.port = work / "root", free_port()
        self.sets = ["--set", f"paths.root={self.root}", "--set", f"server.port={self.port}"]

    def argv(self, *extra: str, python: str = PYTHON) -> list[str]:
        return [python, "-m", "ds4_converge.cli", str(SPEC), *self.sets, *extra]

    def converge(self, *extra: str) -> dict:
        proc = subprocess.run(self.argv("--json", *extra), capture_output=True, text=True)
        document = json.loads(proc.stdout)
        if proc.returncode != 0:
            raise SystemExit(f"converge failed: {document['error']}")
        return document

    def stop(self) -> None:
        subprocess.run([PYTHON, "-m", "ds4_converge.cli", "stop", str(SPEC), *self.sets],
                       capture_output=True)


def measure_noop(box: Box, work: Path, runs: int, baseline: Path | None) -> dict:
    state = json.loads((box.root / "state.json").read_text())["current"]
    model = re.search(r" -m (\S+)", " ".join(state["command"])).group(1)
    playbook = work / "noop.yml"
    playbook.write_text(PLAYBOOK.format(model=model, port=box.port, mirror=REPO / "build" / "ds4-sim.git"))
    ansible_env = {**os.environ, "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_NOCOLOR": "1",
                   "ANSIBLE_LOCAL_TEMP": str(work / "ansible-tmp"), "ANSIBLE_PYTHON_INTERPRETER": PYTHON}
    cases = {
        "ds4-converge (text)": lambda: timed(box.argv()),
        "ds4-converge --json": lambda: timed(box.argv("--json"), check_json=True),
        "ds4-converge --json --refresh (the full plan, no receipt)": lambda: timed(box.argv("--json", "--refresh"),
                                                                                 check_json=True),
        "ansible-playbook (stat, uri, command)": lambda: timed(
            [str(BIN / "ansible-playbook"), "-i", "localhost,", str(playbook)], env=ansible_env),
        "python -c pass (interpreter start)": lambda: timed([PYTHON, "-c", "pass"]),
    }
    if baseline is not None:
        # run from there: `python -m` puts the working directory first on sys.path
        env = {**os.environ, "PYTHONPATH": str(baseline)}
        cases["ds4-converge --json, baseline checkout"] = lambda: timed(box.argv("--json"), env=env, cwd=baseline,
                                                                         check_json=True)
    times = {name: [] for name in cases}
    for name, case in cases.items():  # warm the page cache once
        case()
    for _ in range(runs):
        for name, case in cases.items():
            times[name].append(case())
    return {name: statistics.median(values) for name, values in times.items()} | {
        f"{name} (max)": max(values) for name, values in times.items()}


def imports(box: Box, *extra: str) -> tuple[list[str], float]:
    """Heavy modules the no-op imports, and the total import time it reports (µs → s)."""
    proc = subprocess.run([PYTHON, "-X", "importtime", *box.argv(*extra)[1:]], capture_output=True,
                          text=True)
    loaded, total = set(), 0
    for line in proc.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if match:
            loaded.add(match.group(4))
            if not match.group(3).strip(" ") and len(match.group(3)) == 1:
                total += int(match.group(2))
    return sorted(m for m in HEAVY if m in loaded), total / 1e6


def engine_load(box: Box) -> float:
    """Spawn the served release's command as supervisord would, time it until /v1/models answers, stop it."""
    state = json.loads((box.root / "state.json").read_text())["current"]
    port = free_port()
    command = list(state["command"])
    command[command.index("--port") + 1] = str(port)
    command = [a if not a.startswith("DS4_LOCK_FILE=") else f"DS4_LOCK_FILE={box.root}/run/bench.lock"
               for a in command]
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1).read()
                return time.perf_counter() - started
            except OSError:
                if proc.poll() is not None:
                    raise SystemExit("the engine exited while loading")
                time.sleep(0.02)
    finally:
        proc.terminate()
        proc.wait(30)


MARKERS = {"stop": "… stopping", "start": "… starting", "probe": "… probing", "probed": " probe "}


def timeline(argv: list[str], env: dict | None = None) -> dict[str, float]:
    """Run a converge in text mode; when (s after spawn) each step's line appeared, and when it exited."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env)
    seen: dict[str, float] = {}
    for line in proc.stdout:
        now = time.perf_counter() - started
        seen.setdefault("first line", now)
        for key, marker in MARKERS.items():
            if marker in line and key not in seen and (key != "probed" or "changed" in line):
                seen[key] = now
    if proc.wait() != 0:
        raise SystemExit(f"{' '.join(argv)} failed")
    seen["exit"] = time.perf_counter() - started
    return seen


WARM = {"warm process": "1", "no warm process": "0"}  # DS4_CONVERGE_WARM of each kind of run


def measure_restart(box: Box, restarts: int) -> dict:
    """Restarts with and without a warm process, interleaved (and each next to a load measured alone)."""
    soak = 3.0  # health.soak_s of spec/examples/sim.yaml
    envs = {kind: {**os.environ, "DS4_CONVERGE_WARM": value} for kind, value in WARM.items()}
    subprocess.run(box.argv("--check"), env=envs["warm process"], capture_output=True)  # starts the warm one
    time.sleep(3)  # let it import before the first measured run
    loads, results, turn = [], {kind: {"walls": [], "steps": []} for kind in WARM}, 0
    for _ in range(restarts):
        for kind, env in envs.items():
            loads.append(engine_load(box))
            turn += 1
            seen = timeline(box.argv("--set", f"server.ctx={16384 if turn % 2 else 32768}",
                                     "--progress-interval", "0"), env)
            missing = {"stop", "start", "probe", "probed"} - set(seen)
            assert not missing, f"no restart? {seen}"
            results[kind]["walls"].append(seen["exit"])
            results[kind]["steps"].append({
                "start-up, facts and plans (to the stop)": seen["stop"],
                "stop the old engine": seen["start"] - seen["stop"],
                "start the new one": seen["probe"] - seen["start"],
                "probe: load, smoke answer, soak": seen["probed"] - seen["probe"],
                "record, report, exit": seen["exit"] - seen["probed"]})
    load = statistics.median(loads)
    kinds = {}
    for kind, got in results.items():
        overheads = [w - load - soak for w in got["walls"]]
        kinds[kind] = {"wall": statistics.median(got["walls"]), "overhead": statistics.median(overheads),
                       "overhead_max": max(overheads),
                       "steps": {k: statistics.median(s[k] for s in got["steps"]) for k in got["steps"][0]}}
    return {"load": load, "soak": soak, "kinds": kinds, "floor": import_floor()}


def stop_warm(cache: Path) -> None:
    """The warm processes this run started (their pid files), so that none outlives the benchmark."""
    for pidfile in (cache / "ds4-converge" / "warm").glob("*.pid"):
        try:
            os.kill(int(pidfile.read_text()), 15)
        except (OSError, ValueError):
            pass


def import_floor(runs: int = 9) -> dict[str, float]:
    """What any run that validates a spec pays before it can plan: the interpreter, pydantic, the spec models."""
    def median(code: str) -> float:
        return statistics.median(timed([PYTHON, "-c", code]) for _ in range(runs))

    bare = median("pass")
    return {"python -c pass": bare, "+ import pydantic (BaseModel)": median("from pydantic import BaseModel") - bare,
            "+ the spec models and loader": median("import ds4_converge.spec.loader") - bare}


def machine() -> str:
    load = os.getloadavg()
    return (f"{date.today()}, {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"load average at the start {load[0]:.1f}")


def noop_report(result: dict, json_imports: list[str], text_imports: list[str], runs: int, where: str) -> str:
    tool, ansible = result["ds4-converge (text)"], result["ansible-playbook (stat, uri, command)"]
    tool_json = result["ds4-converge --json"]
    lines = [NOOP_HEADING, "",
             f"`benchmarks/tool_speed.py`, {where}; medians of {runs} interleaved runs of each, wall time with "
             f"process start, after one warm-up run each.", "",
             "| command | median | max |", "|---|---|---|"]
    for name in result:
        if not name.endswith("(max)"):
            lines.append(f"| {name} | {result[name]:.3f} s | {result[name + ' (max)']:.3f} s |")
    lines += ["", f"Ansible / ds4-converge: **{ansible / tool:.1f}×** (text output), **{ansible / tool_json:.1f}×** "
              f"(--json, what the fleet role runs).", ""]
    if "ds4-converge --json, baseline checkout" in result:
        base = result["ds4-converge --json, baseline checkout"]
        lines += [f"Baseline checkout / this one (--json): {base / tool_json:.1f}×.", ""]
    lines += [f"Heavy libraries imported by the no-op: --json {json_imports or 'none'}; text output "
              f"{text_imports or 'none'} (of {', '.join(HEAVY)}).", ""]
    return "\n".join(lines)


def restart_report(result: dict, restarts: int, where: str) -> str:
    kinds, warm, cold = result["kinds"], result["kinds"]["warm process"], result["kinds"]["no warm process"]
    lines = [
        RESTART_HEADING, "",
        f"`benchmarks/tool_speed.py`, {where}; {restarts} converges of each kind in text mode, interleaved, "
        f"alternating server.ctx, each a restart of the engine through the whole probe (smoke answer, "
        f"{result['soak']:.0f} s soak), each next to a load of the engine measured alone; medians. *Warm process*: "
        "`DS4_CONVERGE_WARM=1`, the command runs in a child forked by a resident process that has the tool "
        "imported (cli/warm.py; from a terminal this is the default); *no warm process*: `DS4_CONVERGE_WARM=0`, "
        "the command imports everything itself.", "",
        "| what | warm process | no warm process |", "|---|---|---|",
        f"| wall time of the converge that restarts | {warm['wall']:.2f} s | {cold['wall']:.2f} s |",
        f"| the engine's own load (spawn to /v1/models, measured alone) | {result['load']:.2f} s | same |",
        f"| health.soak_s | {result['soak']:.2f} s | same |",
        f"| **restart overhead** (wall − load − soak) | **{warm['overhead']:.2f} s** (max "
        f"{warm['overhead_max']:.2f} s) | {cold['overhead']:.2f} s (max {cold['overhead_max']:.2f} s) |", "",
        "Where the time goes (when each step's line appeared; medians):", "",
        "| step | warm process | no warm process |", "|---|---|---|"]
    lines += [f"| {step} | {warm['steps'][step]:.3f} s | {cold['steps'][step]:.3f} s |" for step in warm["steps"]]
    lines += ["", "What a run without a warm process pays before it can plan (process start to end, medians of 9):",
              "", "| | |", "|---|---|"]
    lines += [f"| {what} | {seconds:.3f} s |" for what, seconds in result["floor"].items()]
    floor = result["floor"]
    spec = floor["python -c pass"] + floor["+ the spec models and loader"]
    probe_extra = warm["steps"]["probe: load, smoke answer, soak"] - result["load"] - result["soak"]
    lines += ["", f"Reading: the target (≤ 0.5 s) is {'met' if warm['overhead'] <= 0.5 else 'not met'} with a warm "
              f"process ({warm['overhead']:.2f} s, {cold['overhead'] / warm['overhead']:.1f}× less than without "
              f"one). Without it, a restart cannot plan before the interpreter has started and pydantic and the spec "
              f"models are imported ({spec:.2f} s here), and the roles, jinja2 and supervisord's client follow; the "
              f"warm process has all of that imported and forks a fresh run per command, which leaves the "
              f"interpreter start of the command itself, the facts (a few host commands), the plans, stopping and "
              f"starting the engine under supervisord, and the probe's {probe_extra:.2f} s beyond the load and soak "
              "(its polling and the smoke answer)."]
    return "\n".join(lines + [""])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--restarts", type=int, default=5)
    parser.add_argument("--baseline", type=Path)
    parser.add_argument("--no-report", action="store_true")
    args = parser.parse_args()
    where = machine()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        os.environ["XDG_CACHE_HOME"] = str(work / "user-cache")  # the no-op receipts of this run, not ~/.cache's
        box = Box(work)
        try:
            box.converge()
            noop = measure_noop(box, work, args.runs, args.baseline)
            json_imports, _ = imports(box, "--json")
            text_imports, _ = imports(box)
            restart = measure_restart(box, args.restarts)
        finally:
            box.stop()
            stop_warm(work / "user-cache")
    texts = {NOOP_HEADING: noop_report(noop, json_imports, text_imports, args.runs, where),
             RESTART_HEADING: restart_report(restart, args.restarts, where)}
    for heading, text in texts.items():
        print(text)
        if not args.no_report:
            write_section(heading, text)


if __name__ == "__main__":
    main()
