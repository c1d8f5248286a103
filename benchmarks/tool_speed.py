"""How fast the tool itself is: a no-op converge of spec/examples/sim.yaml against Ansible doing the same checks,
and what the no-op path imports. (What a restart costs a user of the endpoint is serving_gap.py's.)

Everything is measured side by side in one run, interleaved (tool, Ansible, tool, …), so that the machine's load
at that moment weighs on both alike; the ratios are what to read on a shared machine.

  no-op      `ds4-converge spec/examples/sim.yaml` on a converged box (text output, and --json), and an
             ansible-playbook on localhost doing the three checks a no-op needs (stat the model file, GET
             /v1/models, a command asking git what the pinned tag is);
  imports    `python -X importtime` of the no-op run: which heavy libraries it loads, and what any run that
             validates a spec pays before it can plan (the interpreter, pydantic, the spec models).

    .venv/bin/python benchmarks/tool_speed.py                   # updates its section in benchmarks/REPORT.md
    .venv/bin/python benchmarks/tool_speed.py --runs 21 --baseline /tmp/old-checkout --no-report

--baseline DIR also times the no-op of another checkout of this repository (e.g. `git archive main | tar -x -C
DIR`), with the same venv, interleaved with the rest.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
from report_file import free_port, measured_on, write_section  # noqa: E402 - benchmarks/ is on sys.path: run as a script
SPEC = REPO / "spec" / "examples" / "sim.yaml"
BIN = Path(sys.executable).parent
# the name the installed ds4-converge script runs as: the supervisord config renders the interpreter's path, and
# a baseline checkout (which renders whatever name started it) must render the same one, or each run is a change
PYTHON = str(BIN / "python3") if (BIN / "python3").exists() else sys.executable
HEAVY = ("numpy", "gguf", "huggingface_hub", "requests", "urllib3", "rich", "jinja2", "supervisor.xmlrpc",
         "tenacity", "pydantic", "ruamel.yaml")
NOOP_HEADING = "## Tool speed: no-op converge against Ansible"

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


def import_floor(runs: int = 9) -> dict[str, float]:
    """What any run that validates a spec pays before it can plan: the interpreter, pydantic, the spec models."""
    def median(code: str) -> float:
        return statistics.median(timed([PYTHON, "-c", code]) for _ in range(runs))

    bare = median("pass")
    return {"python -c pass": bare, "+ import pydantic (BaseModel)": median("from pydantic import BaseModel") - bare,
            "+ the spec models and loader": median("import ds4_converge.spec.loader") - bare}


def machine() -> str:
    load = os.getloadavg()
    return f"{measured_on()}, load average at the start {load[0]:.1f}"


def noop_report(result: dict, json_imports: list[str], text_imports: list[str], floor: dict[str, float], runs: int,
                where: str) -> str:
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
              f"{text_imports or 'none'} (of {', '.join(HEAVY)}).", "",
              "What a full run (no receipt) pays before it can plan (process start to end, medians of 9):", "",
              "| | |", "|---|---|"]
    lines += [f"| {what} | {seconds:.3f} s |" for what, seconds in floor.items()]
    return "\n".join(lines + [""])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
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
            floor = import_floor()
        finally:
            box.stop()
    text = noop_report(noop, json_imports, text_imports, floor, args.runs, where)
    print(text)
    if not args.no_report:
        write_section(NOOP_HEADING, text)


if __name__ == "__main__":
    main()
