"""The serving gap: how long a user of the endpoint goes unanswered when the tool restarts or upgrades the engine.

From the old engine's last answer to the new engine's first answer to /v1/models *and* to a first completion, as
a client that asks all the time sees it. Whatever the tool does before it stops the old engine (Python's start,
imports, facts, plans, a build, the drain) is not in it: the old engine still answers then.

Each switch is one real `ds4-converge SPEC --set …` (through benchmarks/traced_cli.py, which records the run's
step boundaries and its supervisord calls on the system-wide monotonic clock) while, on the same clock,

  a client    asks GET /v1/models every POLL_S (one connection per request, as the engine serves them), then
              once the new engine answers, one non-streamed chat completion (1 token, thinking off);
  a watcher   waits on the old engine's pidfd for its exit, and reads supervisord's children every
              millisecond for the new engine's fork.

The gap is cut into

  drain   the tool's wait for requests in flight (service/drain.py) — before the gap: the old engine answers
          all through it; shown for what it costs the run;
  stop    the old engine's last answer → its exit (SIGTERM through supervisord; the engine's own shutdown);
  spawn   the tool's call that has supervisord start the program → supervisord's fork of the new engine;
  load    the new engine's command started alone (no tool, no supervisord) → /v1/models answers → a first
          completion answered: medians of LOAD_RUNS, measured between the switches;
  tool    everything else: supervisord noticing the exit, the tool's own steps between the stop and the start
          (waiting for the process group, the state and program file written, supervisord's config re-read),
          and what the new engine's load took in the run beyond its load alone (the tool's probe beside it).

Restart: server.ctx alternates. Upgrade: engine.ref alternates between two versions, each built before the
first measured switch (a build happens before the old engine stops, so it is not in the gap either).

    .venv/bin/python benchmarks/serving_gap.py                 # the simulated engine; updates REPORT.md
    DS4_ENGINE_CACHE=/work/ds4-engine-cache .venv/bin/python benchmarks/serving_gap.py --real \\
        --phantom engine/models/phantom.gguf                   # also the real engine (upstream 8d57664 ↔ b030961)

--real takes the upstream trees that tests/real_engine.py builds (DS4_ENGINE_CACHE: the shared build cache;
--real-tree DIR, twice, names two built trees instead) and serves --phantom, a GGUF the real engine loads.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from report_file import free_port, measured_on, write_section  # noqa: E402

SIM_SPEC = REPO / "spec" / "examples" / "sim.yaml"
BIN = Path(sys.executable).parent
PYTHON = str(BIN / "python3") if (BIN / "python3").exists() else sys.executable
HEADING = "## Serving gap: restart and upgrade"
TARGET_S = 0.3
POLL_S = 0.005
LOAD_RUNS = 2  # per switch
MODEL_ID = "deepseek-v4-flash"
NON_THINKING = "deepseek-v4-flash-non-thinking"


# ------------------------------------------------------------------------------------------------ the client


def _request(url: str, body: dict | None = None, timeout: float = 5) -> bool:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Connection": "close", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as answer:
            answer.read()
            return answer.status == 200
    except OSError:
        return False


def completion(endpoint: str, timeout: float = 1800) -> bool:  # a real engine on a CPU: minutes per token
    return _request(f"{endpoint}/v1/chat/completions",
                    {"model": NON_THINKING, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1,
                     "stream": False}, timeout=timeout)


class Client(threading.Thread):
    """A user who asks all the time: the old engine's last answer, the new one's first /v1/models, first completion."""

    def __init__(self, endpoint: str):
        super().__init__(daemon=True)
        self.endpoint, self.done = endpoint, threading.Event()
        self.last_old: float | None = None
        self.first_models: float | None = None
        self.first_completion: float | None = None
        self.failures = 0

    def run(self) -> None:
        models = f"{self.endpoint}/v1/models"
        while not self.done.is_set():
            ok = _request(models, timeout=2)
            now = time.monotonic()
            if ok and not self.failures:
                self.last_old = now
            elif ok:
                self.first_models = now
                if completion(self.endpoint):
                    self.first_completion = time.monotonic()
                    return
            else:
                self.failures += 1
            time.sleep(POLL_S)


class Watcher(threading.Thread):
    """The old engine's exit (its pidfd) and every new child of supervisord, with when it was first seen."""

    def __init__(self, supervisord: int, old: int | None):
        super().__init__(daemon=True)
        self.supervisord, self.old, self.done = supervisord, old, threading.Event()
        self.before = set(children(supervisord))
        self.seen: dict[int, float] = {}
        self.old_exit: float | None = None
        self.pidfd = os.pidfd_open(old) if old else None

    def run(self) -> None:
        while not self.done.is_set():
            if self.pidfd is not None and self.old_exit is None:
                if select.select([self.pidfd], [], [], 0.001)[0]:
                    self.old_exit = time.monotonic()
                    os.close(self.pidfd)
            else:
                time.sleep(0.001)
            now = time.monotonic()
            for pid in children(self.supervisord):
                if pid not in self.before:
                    self.seen.setdefault(pid, now)
            if self.seen and self.old_exit is not None:
                return  # nothing more to see: do not take CPU from the new engine's load


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


# ------------------------------------------------------------------------------------------------ one box


@dataclass
class Box:
    """One root and port, converged by the real CLI (traced), with what varies per switch in `sets`."""

    spec: Path
    root: Path
    port: int
    sets: list[str]
    env: dict = field(default_factory=lambda: dict(os.environ))

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cli(self, *args: str, trace: Path | None = None, timeout: float = 1800) -> subprocess.CompletedProcess:
        env = dict(self.env)
        if trace is not None:
            env["DS4C_BENCH_TRACE"] = str(trace)
            argv = [PYTHON, str(HERE / "traced_cli.py"), *args]
        else:
            argv = [PYTHON, "-m", "ds4_converge.cli", *args]
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)

    def converge(self, *sets: str, trace: Path | None = None) -> dict:
        proc = self.cli(str(self.spec), *self.sets, *sets, "--json", trace=trace)
        try:
            document = json.loads(proc.stdout)
        except json.JSONDecodeError:
            raise SystemExit(f"converge gave no report ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
        if proc.returncode != 0:
            raise SystemExit(f"converge failed ({proc.returncode}): {document.get('error')}\n{document.get('detail')}")
        return document

    def stop(self) -> None:
        self.cli("stop", str(self.spec), *self.sets, timeout=300)

    def supervisord(self) -> int:
        return int((self.root / "run" / "supervisord.pid").read_text().split()[0])

    def engine_pid(self) -> int | None:
        found = [p for p in children(self.supervisord()) if "ds4-server" in cmdline(p)]
        return found[0] if found else None

    def command(self) -> list[str]:
        return list(json.loads((self.root / "state.json").read_text())["current"]["command"])


def load_alone(box: Box) -> tuple[float, float]:
    """The served command started by itself on another port: (started → /v1/models answers, → a first completion
    answered)."""
    port = free_port()
    command = box.command()
    command[command.index("--port") + 1] = str(port)
    lock = box.root / "run" / "bench-alone.lock"
    command = [f"DS4_LOCK_FILE={lock}" if a.startswith("DS4_LOCK_FILE=") else a for a in command]
    endpoint = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while not _request(f"{endpoint}/v1/models", timeout=2):
            if proc.poll() is not None:
                raise SystemExit(f"the engine exited ({proc.returncode}) while loading alone: {command}")
            if time.monotonic() - started > 900:
                raise SystemExit("the engine did not load alone within 900 s")
            time.sleep(POLL_S)
        models = time.monotonic() - started
        if not completion(endpoint):
            raise SystemExit("the engine loaded alone did not answer a completion")
        return models, time.monotonic() - started
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


# ------------------------------------------------------------------------------------------------ one switch


def read_trace(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def first(trace: list[dict], event: str, after: float = 0.0, **match) -> dict | None:
    for entry in trace:
        if entry["event"] == event and entry["t"] >= after and all(entry.get(k) == v for k, v in match.items()):
            return entry
    return None


def switch(box: Box, sets: list[str], work: Path, name: str) -> dict:
    """One converge that switches the engine, measured from outside and from its trace."""
    trace_file = work / "traces" / f"{name}.trace"
    trace_file.parent.mkdir(exist_ok=True)
    trace_file.unlink(missing_ok=True)
    old = box.engine_pid()
    client, watcher = Client(box.endpoint), Watcher(box.supervisord(), old)
    client.start()
    watcher.start()
    time.sleep(0.05)
    if client.last_old is None:
        time.sleep(0.5)
    started = time.monotonic()
    try:
        document = box.converge(*sets, trace=trace_file)
        client.join(60)
    finally:
        client.done.set()
        watcher.done.set()
        watcher.join(5)
    ended = time.monotonic()
    service = next(r for r in document["roles"] if r["name"] == "service")
    if service["status"] != "changed" or old is None:
        raise SystemExit(f"{name}: not a switch: {service}")
    if None in (client.last_old, client.first_models, client.first_completion, watcher.old_exit):
        raise SystemExit(f"{name}: the client or the watcher missed a moment: {vars(client)} {watcher.old_exit}")
    new = box.engine_pid()
    trace = read_trace(trace_file)
    stop_call = first(trace, "rpc", name="supervisor.stopProcess", phase="begin")
    stop_end = first(trace, "rpc", after=stop_call["t"], name="supervisor.stopProcess", phase="end")
    stopped = first(trace, "point", point="old-stopped")
    written = first(trace, "point", point="program-written")
    asked = min(e["t"] for e in trace if e["event"] == "rpc" and e["phase"] == "begin" and e["t"] >= written["t"]
                and e["name"] in ("supervisor.addProcessGroup", "supervisor.startProcess"))
    drain_begin, drain_end = first(trace, "drain", phase="begin"), first(trace, "drain", phase="end")
    forked = watcher.seen[new]
    last = client.last_old
    return {
        "gap": client.first_completion - last,
        "drain": drain_end["t"] - drain_begin["t"] if drain_begin and drain_end else 0.0,
        "stop": watcher.old_exit - max(last, stop_call["t"]),
        "spawn": forked - asked,
        "load in the run": client.first_completion - forked,
        "to first /v1/models in the run": client.first_models - forked,
        # the tool's steps between the old engine's exit and the start
        "supervisord notices the exit (stopProcess returns)": stop_end["t"] - watcher.old_exit,
        "the process group is gone (old-stopped)": stopped["t"] - stop_end["t"],
        "state.json and the program file written": written["t"] - stopped["t"],
        "supervisord re-reads its config, is asked to start": asked - written["t"],
        "stop asked → the old engine's last answer (before the gap)": max(0.0, last - stop_call["t"]),
        "run": ended - started,
    }


@dataclass
class Variants:
    """What a switch changes: a restart another setting (`--set KEY=…` with the next of `settings`), an upgrade
    the next of `refs`; everything else stays as the switch before left it."""

    ref_key: str
    refs: list[str]
    setting_key: str
    settings: list[str]
    ref: int = 0
    setting: int = 0

    def sets(self) -> list[str]:
        return ["--set", f"{self.ref_key}={self.refs[self.ref]}", "--set",
                f"{self.setting_key}={self.settings[self.setting]}"]

    def next(self, kind: str) -> list[str]:
        if kind == "restart":
            self.setting = (self.setting + 1) % len(self.settings)
        else:
            self.ref = (self.ref + 1) % len(self.refs)
        return self.sets()


KINDS = ("restart", "upgrade")
# the tool's steps between the old engine's exit and its call that has supervisord start the new one
STEPS = ("supervisord notices the exit (stopProcess returns)", "the process group is gone (old-stopped)",
         "state.json and the program file written", "supervisord re-reads its config, is asked to start")
STEPS_SUM = "the tool's steps from the old engine's exit to the start"


def measure(box: Box, variants: Variants, runs: int, work: Path) -> dict:
    """Switches of each kind interleaved (restart, upgrade, restart, …), each next to a load measured alone."""
    got = {kind: [] for kind in KINDS}
    loads = []
    for i in range(runs):
        for kind in KINDS:
            s = switch(box, variants.next(kind), work, f"{kind}-{i}")
            # the command that now serves, started alone: the load of exactly what the switch started
            alone = [load_alone(box) for _ in range(LOAD_RUNS)]
            s["load"] = statistics.median(a[1] for a in alone)
            s["load alone to /v1/models"] = statistics.median(a[0] for a in alone)
            s["tool"] = s["gap"] - s["stop"] - s["spawn"] - s["load"]
            s["load in the run beyond its load alone"] = s["load in the run"] - s["load"]
            s[STEPS_SUM] = sum(s[k] for k in STEPS)
            loads.append(s["load"])
            got[kind].append(s)
            print(f"{kind} {i}: gap {s['gap']:.3f} s = stop {s['stop']:.3f} + spawn {s['spawn']:.3f} + load in the "
                  f"run {s['load in the run']:.3f} (to /v1/models {s['to first /v1/models in the run']:.3f}; alone "
                  f"{s['load alone to /v1/models']:.3f}, {s['load']:.3f} with the completion) + the tool's steps "
                  f"{s[STEPS_SUM]:.3f}; tool {s['tool']:.3f}", file=sys.stderr, flush=True)
    result = {"loads": loads, "kinds": {}}
    for kind, switches in got.items():
        result["kinds"][kind] = {
            "median": {k: statistics.median(s[k] for s in switches) for k in switches[0]},
            "max": {k: max(s[k] for s in switches) for k in switches[0]},
            "runs": len(switches)}
    return result


# ------------------------------------------------------------------------------------------------ the two sides


def sim_box(work: Path) -> tuple[Box, dict]:
    root, port = work / "sim-root", free_port()
    box = Box(SIM_SPEC, root, port, ["--set", f"paths.root={root}", "--set", f"server.port={port}",
                                     "--set", f"server.kv_disk_dir={work}/kv", "--set", "health.soak_s=1"])
    # restart: another ctx, same release; upgrade: another release (v0.2.0 ↔ v0.3.0, both fork flavour)
    return box, Variants("engine.ref", ["v0.2.0", "v0.3.0"], "server.ctx", ["32768", "16384"])


GIT_ENV = {"GIT_AUTHOR_NAME": "ds4", "GIT_AUTHOR_EMAIL": "ds4@invalid", "GIT_COMMITTER_NAME": "ds4",
           "GIT_COMMITTER_EMAIL": "ds4@invalid", "GIT_AUTHOR_DATE": "2026-05-21T00:00:00Z",
           "GIT_COMMITTER_DATE": "2026-05-21T00:00:00Z"}
BUILT = {"ds4", "ds4-server", "ds4-bench", "ds4-eval", "ds4-agent", "ds4_native", "ds4_test", "ds4_server_test",
         "ds4_agent_test", "ds4flash.gguf"}


def real_trees(named: list[Path]) -> list[tuple[str, Path]]:
    """(version, built tree) of the two upstream versions: named, or built (once, cached) by tests/real_engine.py."""
    if named:
        if len(named) != 2:
            raise SystemExit("--real-tree: name two built upstream trees (the upgrade goes from one to the other)")
        return [(f"tree{i}", tree) for i, tree in enumerate(named)]
    sys.path.insert(0, str(REPO / "tests"))
    import real_engine

    try:
        return [(version, real_engine.built(version).tree) for version in real_engine.VERSIONS]
    except FileNotFoundError as missing:
        raise SystemExit(str(missing)) from None


def real_repo(trees: list[tuple[str, Path]], dest: Path) -> Path:
    """One git repository, a commit and a tag per version: each tree's sources (its build outputs left out)."""
    env = {**os.environ, **GIT_ENV}
    dest.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=dest, env=env, check=True)
    for version, tree in trees:
        for entry in dest.iterdir():
            if entry.name != ".git":
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        shutil.copytree(tree, dest, dirs_exist_ok=True, symlinks=True,
                        ignore=lambda folder, names: [n for n in names if n in BUILT or n.endswith(".o")])
        for argv in (["git", "add", "-A"], ["git", "commit", "-q", "-m", version], ["git", "tag", version]):
            subprocess.run(argv, cwd=dest, env=env, check=True, capture_output=True)
    return dest


def real_box(work: Path, trees: list[tuple[str, Path]], phantom: Path) -> tuple[Box, dict]:
    repo = real_repo(trees, work / "upstream.git")
    root, port = work / "real-root", free_port()
    spec = work / "real.yaml"
    first_version = trees[0][0]
    spec.write_text(json.dumps({
        "engine": {"repo": str(repo), "ref": first_version, "target": "cpu", "jobs": os.cpu_count() or 1},
        # the phantom is 86.7 GB apparent (sparse): over the budget of a small host, which warns and goes on
        "model": {"main": str(phantom.resolve()), "memory_budget": "warn"},
        "server": {"port": port, "ctx": 1024, "stop_wait_s": 60},
        # the phantom's answers are noise: no smoke text to expect; /v1/models and the soak still gate it
        "health": {"deadline_s": 900, "soak_s": 1, "interval_s": 0.2, "smoke": None},
        "paths": {"root": str(root)}}))
    box = Box(spec, root, port, [])
    return box, Variants("engine.ref", [v for v, _ in trees], "server.ctx", ["1024", "2048"])


def prepare(box: Box, variants: Variants) -> None:
    """Every release built (before any measured switch), the box serving the first variant."""
    for ref in reversed(range(len(variants.refs))):
        variants.ref = ref
        box.converge(*variants.sets())


# ------------------------------------------------------------------------------------------------ the report


def machine() -> str:
    load = os.getloadavg()
    return f"{measured_on()}, load average at the start {load[0]:.1f}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


ROWS = [("gap", "**serving gap** (old engine's last answer → new one's first completion)"),
        ("drain", "drain (before the gap: the old engine answers meanwhile)"),
        ("stop", "stop: last answer → old engine's exit"),
        ("spawn", "spawn: asked to start → supervisord forks the engine"),
        ("load", "load, measured alone: started → /v1/models → first completion"),
        ("tool", "**the tool's own part** (gap − stop − spawn − load)")]
TOOL_ROWS = [*STEPS, STEPS_SUM,
             "load in the run beyond its load alone"]


def side_report(title: str, result: dict, runs: int) -> list[str]:
    kinds = result["kinds"]
    names = list(kinds)
    lines = [f"### {title}", "",
             "| part | " + " | ".join(f"{k} median (max)" for k in names) + " |",
             "|---|" + "---|" * len(names)]
    for key, label in ROWS:
        cells = []
        for kind in names:
            cells.append(f"{kinds[kind]['median'][key]:.3f} s ({kinds[kind]['max'][key]:.3f} s)")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "Where the tool's own part goes (medians):", "",
              "| step | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for key in TOOL_ROWS:
        lines.append(f"| {key} | " + " | ".join(_ms(kinds[k]["median"][key]) for k in names) + " |")
    lines += ["", "| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names),
              "| new engine's fork → its first /v1/models answer, in the run | "
              + " | ".join(f"{kinds[k]['median']['to first /v1/models in the run']:.3f} s" for k in names) + " |",
              "| the same command started alone → its first /v1/models answer | "
              + " | ".join(f"{kinds[k]['median']['load alone to /v1/models']:.3f} s" for k in names) + " |",
              "| stop asked → the old engine's last answer (before the gap) | "
              + " | ".join(_ms(kinds[k]["median"]["stop asked → the old engine's last answer (before the gap)"])
                           for k in names) + " |",
              "| the whole converge (wall) | "
              + " | ".join(f"{kinds[k]['median']['run']:.2f} s" for k in names) + " |", ""]
    return lines


def report(results: dict[str, tuple[str, dict]], runs: int, where: str) -> str:
    lines = [HEADING, "",
             f"`benchmarks/serving_gap.py`, {where}; {runs} switches of each kind, interleaved, each a real "
             f"`ds4-converge SPEC --set …` through the whole probe, next to a load of the engine measured alone; "
             f"the client asks /v1/models every {POLL_S * 1000:.0f} ms (so a moment is known to about that). "
             f"Target: the tool's own part ≤ {TARGET_S} s.", ""]
    verdicts = []
    for side, (title, result) in results.items():
        lines += side_report(title, result, runs)
        worst = max(k["median"]["tool"] for k in result["kinds"].values())
        verdicts.append(f"{side}: {worst:.3f} s ({'met' if worst <= TARGET_S else 'not met'})")
    lines += ["The tool's own part, worst median: " + "; ".join(verdicts) + ".", ""]
    for side, (title, result) in results.items():
        steps = {k: v["median"][STEPS_SUM] for k, v in result["kinds"].items()}
        lines += [f"Reading ({side}): the gap is the old engine's stop, supervisord's spawn and the new engine's load, "
                  f"plus the tool's own part. The tool's steps between the old engine's exit and its call that starts "
                  f"the new one are timed exactly from the run's trace: "
                  + ", ".join(f"{_ms(v)} ({k})" for k, v in steps.items())
                  + f" (medians). The rest of its part is the load in the run against the same command loaded alone "
                  f"right after; the loads alone ranged {min(result['loads']):.2f}–{max(result['loads']):.2f} s, so on "
                  f"a machine shared with other work one switch can come out below zero or well above the median: "
                  f"read the medians.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="switches of each kind (default 5)")
    parser.add_argument("--real", action="store_true", help="also the real engine serving --phantom")
    parser.add_argument("--no-sim", action="store_true", help="leave the simulated engine out")
    parser.add_argument("--real-tree", type=Path, action="append", default=[],
                        help="a built upstream tree (twice: the upgrade's two versions); default: tests/real_engine.py's")
    parser.add_argument("--phantom", type=Path, help="the GGUF the real engine serves (engine/models/make_phantom_gguf.py)")
    parser.add_argument("--keep-traces", type=Path, metavar="DIR", help="copy each switch's trace there")
    parser.add_argument("--no-report", action="store_true")
    args = parser.parse_args()
    if args.real and (args.phantom is None or not args.phantom.is_file()):
        parser.error("--real needs --phantom FILE, a GGUF the real engine loads")
    where = machine()
    results = {}
    with tempfile.TemporaryDirectory(prefix="ds4c-gap-") as tmp:
        work = Path(tmp)
        os.environ["XDG_CACHE_HOME"] = str(work / "user-cache")  # this run's no-op receipts, not ~/.cache's
        sides = []
        if not args.no_sim:
            sides.append(("simulator", "The simulated engine (spec/examples/sim.yaml; upgrade v0.2.0 ↔ v0.3.0)",
                          lambda: sim_box(work)))
        if args.real:
            sides.append(("real engine", "The real engine (upstream, `make cpu`) serving a phantom model "
                          f"({args.phantom.name}); upgrade between two upstream versions",
                          lambda: real_box(work, real_trees(args.real_tree), args.phantom)))
        for side, title, make in sides:
            box, variants = make()
            try:
                prepare(box, variants)
                results[side] = (title, measure(box, variants, args.runs, work))
            finally:
                box.stop()
                if args.keep_traces and (work / "traces").is_dir():
                    shutil.copytree(work / "traces", args.keep_traces / side.replace(" ", "-"), dirs_exist_ok=True)
    text = report(results, args.runs, where)
    print(text)
    if not args.no_report:
        write_section(HEADING, text)


if __name__ == "__main__":
    main()
