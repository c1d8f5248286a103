"""The front door side by side: what a client that sends a steady stream of requests sees through an upgrade, a
restart and a revert of a wrong-answer release, with and without `front` (HAProxy in front of the engine).

One client sends one request after another (a non-streamed chat completion asking the smoke question, thinking
off, 50 ms apart) to the endpoint people use: the engine's port without `front`, the front door with it (with a
key). Each switch is one real `ds4-converge SPEC --set …`. Counted per switch:

  failed   requests that got no answer or an error status (a refused connection counts once per attempt)
  bad      answers that do not say "Paris" (the wrong-answer release says "London")
  refused for  from the first failed request to the end of the last one
  held     requests whose latency exceeded the steady latency by more than HELD_S: the added latency of those,
           median and max, next to the engine's load time (DS4_SIM_LOAD_SECONDS)

    .venv/bin/python benchmarks/front_door.py              # the simulated engine; updates REPORT.md
    DS4_ENGINE_CACHE=… .venv/bin/python benchmarks/front_door.py --real --phantom phantom-ds4flash.gguf
    .venv/bin/python benchmarks/front_door.py --spark      # the held road at a Spark's timings, both front.flip

--real measures the real engine instead (upstream 8d57664 → b030961 as the upgrade, a one-line change of 8d57664
whose greedy sampling picks the wrong token as the bad release, `make cpu`), serving --phantom (made by
engine/models/make_phantom_gguf.py): every request is the 5-token "Hi" with max_tokens 1, answered " phantom",
each costing seconds on a CPU, so the steady latency varies by seconds and only latency above it by more than
REAL_HELD_S counts as held. The two runs (without, then with `front`) share one root, so each release is built
once (before the switches measured: a build happens while the old engine still serves).

Needs haproxy on PATH (`apt-get install haproxy`).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from report_file import free_port, measured_on, write_section  # noqa: E402

HEADING = "## Front door: failed requests and held latency through switches"
REAL_HEADING = "## Front door on the real engine (phantom, CPU)"
LOAD_S = 3.0  # the simulated engine's load: what a held request waits for at least
HELD_S = 0.25
KEY = "sk-bench-front-door"
BODY = json.dumps({"model": "deepseek-chat", "max_tokens": 16, "temperature": 0,
                   "messages": [{"role": "user", "content": "What is the capital of France?"}]}).encode()
SWITCHES = [("upgrade", {"engine.ref": "v0.3.0"}), ("restart", {"engine.ref": "v0.3.0", "server.ctx": "16384"}),
            ("revert (wrong answer)", {"engine.ref": "v0.3.1-wrong-answer"})]
# the real engine: upstream's two versions, and 8d57664 with greedy sampling off by one (tests/realserve/conftest.py)
REAL_HELD_S = 10.0
REAL_BODY = json.dumps({"model": "deepseek-chat", "max_tokens": 1, "temperature": 0, "thinking": {"type": "disabled"},
                        "messages": [{"role": "user", "content": "Hi"}]}).encode()
REAL_FIRST = {"engine.ref": "8d57664"}
REAL_SWITCHES = [("upgrade", {"engine.ref": "b030961"}),
                 ("restart", {"engine.ref": "b030961", "server.env.DS4C_BENCH_SETTING": "restart"}),
                 ("revert (wrong answer)", {"engine.ref": "wrong-answer"})]


class Client(threading.Thread):
    def __init__(self, url: str, key: str | None, body: bytes = BODY, good: str = "Paris"):
        super().__init__(daemon=True)
        self.url, self.key, self.done = url, key, threading.Event()
        self.body, self.good = body, good
        self.records: list[tuple[float, float, str]] = []  # (start, latency, "ok" | "bad" | "failed")

    def run(self) -> None:
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {self.key}"} if self.key else {})}
        while not self.done.is_set():
            start = time.monotonic()
            try:
                request = urllib.request.Request(f"{self.url}/v1/chat/completions", data=self.body, headers=headers)
                with urllib.request.urlopen(request, timeout=900) as answer:
                    text = json.loads(answer.read())["choices"][0]["message"]["content"]
                outcome = "ok" if self.good in text else "bad"
            except (OSError, ValueError, KeyError, urllib.error.HTTPError):
                outcome = "failed"
            self.records.append((start, time.monotonic() - start, outcome))
            time.sleep(0.05)


def converge(spec: Path, sets: list[str], changes: dict) -> dict:
    argv = [sys.executable, "-m", "ds4_converge.cli", str(spec), *sets, "--json"]
    for key, value in changes.items():
        argv += ["--set", f"{key}={value}"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    return json.loads(proc.stdout)


@dataclass
class Side:
    """What one side of the comparison converges and asks: the simulated engine, or the real one."""

    spec: Path
    front_spec: Path
    first: dict
    switches: list
    body: bytes = BODY
    good: str = "Paris"
    held_s: float = HELD_S
    shared_root: bool = False


SIM = Side(REPO / "spec/examples/sim.yaml", REPO / "spec/examples/sim-front.yaml", {"engine.ref": "v0.2.0"}, SWITCHES)


# the front door's column: none, the road that stops the serving engine first, the road beside it
MODES = [("no", None), ("yes, overlap off", "off"), ("yes, overlap auto", "auto")]


def measure(mode: str | None, work: Path, side: Side = SIM) -> list[dict]:
    front = mode is not None
    root = work / (f"front-{mode}-root" if front and not side.shared_root else "root")
    port = 21000 + os.getpid() % 4000 * 2  # below the ephemeral range: the engine's slots must stay free
    sets = ["--set", f"paths.root={root}", "--set", f"server.port={port}"]
    if not side.shared_root:
        sets += ["--set", f"server.kv_disk_dir={root}/kv", "--set", "health.soak_s=2",
                 "--set", f"server.env.DS4_SIM_LOAD_SECONDS={LOAD_S}"]
    if front:
        keys = work / "keys"
        keys.write_text(KEY + "\n")
        keys.chmod(0o600)
        public, metrics = free_port(), free_port()
        sets += ["--set", f"front.port={public}", "--set", f"front.metrics.port={metrics}",
                 "--set", f"front.keys={keys}", "--set", f"front.overlap={mode}"]
        spec, url = side.front_spec, f"http://127.0.0.1:{public}"
    else:
        spec, url = side.spec, f"http://127.0.0.1:{port}"
    first = converge(spec, sets, side.first)
    assert first["ok"], first["error"]
    rows = []
    try:
        for name, changes in side.switches:
            client = Client(url, KEY if front else None, side.body, side.good)
            client.start()
            time.sleep(2)
            while not any(outcome == "ok" for _, _, outcome in client.records):  # a steady latency first
                time.sleep(0.5)
            began = time.monotonic()
            document = converge(spec, sets, changes)
            ended = time.monotonic()
            time.sleep(2)
            client.done.set()
            client.join(timeout=1000)
            steady = statistics.median(lat for start, lat, outcome in client.records
                                       if outcome == "ok" and start < began)
            during = [r for r in client.records if r[0] + r[1] >= began and r[0] <= ended]
            failed = [(start, start + lat) for start, lat, outcome in client.records if outcome == "failed"]
            held = [lat - steady for start, lat, outcome in during if outcome != "failed" and lat - steady > side.held_s]
            label = dict((m, label) for label, m in MODES)[mode]
            if mode == "auto":  # the road the plan took, as its report says
                beside = "loads beside the serving one" in json.dumps(document.get("roles"))
                label += ": beside" if beside else ": stopped first"
            rows.append({"switch": name, "front": label, "ok": document["ok"], "reverted": document["reverted"],
                         "requests": len(client.records),
                         "failed": sum(r[2] == "failed" for r in client.records),
                         "bad": sum(r[2] == "bad" for r in client.records),
                         "held": len(held), "held_median_s": statistics.median(held) if held else 0.0,
                         "held_max_s": max(held) if held else 0.0, "switch_s": ended - began,
                         "steady_s": steady,
                         "slowest_during_s": max((lat for _, lat, outcome in during if outcome != "failed"),
                                                 default=0.0),
                         "unanswered_s": failed[-1][1] - failed[0][0] if failed else 0.0})
    finally:
        subprocess.run([sys.executable, "-m", "ds4_converge.cli", "stop", str(spec), *sets], capture_output=True,
                       timeout=300)
    return rows


def real_side(work: Path, phantom: Path) -> Side:
    """A spec of the real engine serving the phantom (both sides in one root), and its repository: the two
    upstream versions built by tests/real_engine.py, and the wrong-answer release on top of 8d57664."""
    import serving_gap

    repo = serving_gap.real_repo(serving_gap.real_trees([]), work / "upstream.git")
    env = {**os.environ, **serving_gap.GIT_ENV}
    subprocess.run(["git", "checkout", "-q", "8d57664"], cwd=repo, env=env, check=True)
    source = repo / "ds4.c"
    text = source.read_text()
    wrong = text.replace("            best = (int)i;\n        }\n    }\n    return best;\n}",
                         "            best = (int)i;\n        }\n    }\n    return best + 1;\n}")
    assert wrong != text, "8d57664's greedy sampler is not where it was"
    source.write_text(wrong)
    for argv in (["git", "commit", "-q", "-am", "greedy sampling picks the token after the best"],
                 ["git", "tag", "wrong-answer"], ["git", "checkout", "-q", "main"]):
        subprocess.run(argv, cwd=repo, env=env, check=True)
    (work / "kv").mkdir()
    base = {
        "engine": {"repo": str(repo), "ref": "8d57664", "target": "cpu", "jobs": os.cpu_count() or 1},
        "model": {"main": str(phantom.resolve()), "memory_budget": "warn"},
        "server": {"ctx": 1024, "stop_wait_s": 60, "drain_s": 300, "kv_disk_dir": str(work / "kv"),
                   "extra_args": ["--kv-cache-min-tokens", "4", "--kv-cache-boundary-align-tokens", "0",
                                  "--kv-cache-boundary-trim-tokens", "0"]},
        "health": {"deadline_s": 900, "soak_s": 1, "interval_s": 0.5,
                   "smoke": {"prompt": "Hi", "expect": "phantom", "max_tokens": 1}}}
    spec = work / "real.yaml"
    spec.write_text(json.dumps(base))
    front_spec = work / "real-front.yaml"
    front_spec.write_text(json.dumps({**base, "front": {"host": "127.0.0.1", "port": 8000, "hold_s": 1800,
                                                        "keys": str(work / "keys"),
                                                        "metrics": {"host": "127.0.0.1", "port": 8405}}}))
    return Side(spec, front_spec, REAL_FIRST, REAL_SWITCHES, REAL_BODY, "phantom", REAL_HELD_S, shared_root=True)


def table(rows: list[dict]) -> list[str]:
    lines = ["| switch | front | requests | failed | refused for | bad answers | held | added latency median (max) "
             "| latency steady / slowest during the switch | switch took | run |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        run = "ok" if r["ok"] else ("reverted" if r["reverted"] else "failed")
        lines.append(f"| {r['switch']} | {r['front']} | {r['requests']} | {r['failed']} | "
                     f"{r['unanswered_s']:.1f} s | {r['bad']} | {r['held']} | {r['held_median_s']:.2f} s "
                     f"({r['held_max_s']:.2f} s) | {r['steady_s']:.2f} s / {r['slowest_during_s']:.2f} s | {r['switch_s']:.1f} s | "
                     f"{run} |")
    return lines


def machine() -> str:
    haproxy = subprocess.run(["haproxy", "-v"], capture_output=True, text=True).stdout.splitlines()[0]
    return f"{measured_on('front_door.py')}, {haproxy.split(' - ')[0]}"


def section(heading: str, intro: str, rows: list[dict], closing: str) -> str:
    """A section of REPORT.md: its heading, what was measured and how, the table of switches, what it shows."""
    return "\n".join([heading, "", intro, "", *table(rows), "", closing]) + "\n"


def report(rows: list[dict]) -> str:
    intro = (f"{machine()}; the simulated engine (load {LOAD_S:.0f} s), one client sending one request after another "
             f"(50 ms apart) through each switch, one run of each, on the shared development machine while other "
             f"test suites ran (its noise is in the timings).")
    closing = ("Without `front` the client meets the switch: every attempt while no engine listens is refused "
               "(failed), and a wrong-answer release answers it until the probe's verdict (bad). With `front` and "
               "`overlap: off` (the road of a box that holds one engine, a Spark with the 80 GB model), HAProxy holds "
               "what arrives from the moment the serving engine takes no new request (a hold server, refused, retried "
               "every 250 ms) and sends it on once the new engine answered its smoke (`front.flip: after-smoke`; its "
               "soak goes on while it serves) or the switch reverts (last good's slot): a held request waits for the "
               "drain, the stop, the load and the smoke, not the soak (the section at a Spark's timings below). With `overlap: auto` and memory for two engines (the simulator's model fits twice), the new "
               "engine loads and is probed beside the serving one and clients move once it passed: no request waits "
               "for a load, and the wrong-answer release's candidate is stopped while last good serves on. "
               f"The real engine: the next section ({REAL_HEADING.removeprefix('## ')}).")
    return section(HEADING, intro, rows, closing)


def real_report(rows: list[dict], phantom: Path) -> str:
    intro = (f"{machine()}; the real engine (`make cpu`, upstream 8d57664 → b030961; the bad release is 8d57664 with "
             f"greedy sampling off by one) serving the phantom ({phantom.name}, ctx 1024, the disk KV cache on), one "
             f"client asking \"Hi\" (max_tokens 1, answered \" phantom\") one request after another through each "
             f"switch, one run of each. Held: latency above the steady median by more than {REAL_HELD_S:.0f} s (a "
             f"token costs 2–10 s here).")
    closing = ("As on the simulator, with a CPU's seconds per token: without `front` the client's attempts fail "
               "while no engine listens and the wrong-answer release answers it; with `front` nothing fails and "
               "nothing wrong is answered. With `overlap: off` a request held through a switch waits for the drain of "
               "the request in flight, the load and the probe's smoke answer. With `overlap: auto` the candidate "
               "shares the phantom's mapping with the serving engine (a CPU build copies no weights), so a second "
               "engine adds its KV and buffers only and loads beside the first; the two share the 2 cores while the "
               "candidate is probed, which slows the client's requests but holds none. Few requests per switch (one "
               "after another, seconds each), one run: the counts are small. The runs share one root: b030961 is "
               "built in the first run's upgrade (the old engine serves meanwhile) and found built after.")
    return section(REAL_HEADING, intro, rows, closing)


# ------------------------------------------------------------------------------------------ a Spark's timings

SPARK_HEADING = "## Front door at a Spark's timings: the held road, flip after the smoke against after the soak"
SPARK_LOAD_S, SPARK_SOAK_S, SPARK_ANSWER_S = 17.0, 30.0, 20.0
SIM_DECODE_TOK_S = 200  # engine/sim/sim.conf: an answer of N tokens takes N / 200 s
LONG_BODY = json.dumps({"model": "deepseek-chat", "max_tokens": int(SPARK_ANSWER_S * SIM_DECODE_TOK_S),
                        "temperature": 0, "thinking": {"type": "disabled"},
                        "messages": [{"role": "user", "content": "Count from 1 to 100000, separated by spaces."}]}
                       ).encode()
FLIPS = ("after-soak", "after-smoke")  # before this change, and after it


def long_answer(url: str, out: dict) -> None:
    """One answer of SPARK_ANSWER_S through the front door, in flight when the switch begins."""
    start = time.monotonic()
    request = urllib.request.Request(f"{url}/v1/chat/completions", data=LONG_BODY,
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
    try:
        with urllib.request.urlopen(request, timeout=900) as answer:
            out["tokens"] = json.loads(answer.read())["usage"]["completion_tokens"]
    except (OSError, ValueError, KeyError) as exc:
        out["failed"] = repr(exc)
    out["took_s"] = time.monotonic() - start


def spark_measure(flip: str, work: Path) -> dict:
    """One restart on the held road (front.overlap off, the road a Spark with the 80 GB model always takes), with
    a load of SPARK_LOAD_S, a soak of SPARK_SOAK_S and one SPARK_ANSWER_S answer in flight when it begins."""
    import re

    root = work / f"spark-{flip}-root"
    port = 21000 + (os.getpid() + len(flip)) % 4000 * 2
    keys = work / "keys"
    keys.write_text(KEY + "\n")
    keys.chmod(0o600)
    public, metrics = free_port(), free_port()
    sets = ["--set", f"paths.root={root}", "--set", f"server.port={port}", "--set", f"server.kv_disk_dir={root}/kv",
            "--set", f"server.env.DS4_SIM_LOAD_SECONDS={SPARK_LOAD_S:g}", "--set", f"health.soak_s={SPARK_SOAK_S:g}",
            "--set", "health.deadline_s=300", "--set", "front.hold_s=300", "--set", f"front.port={public}",
            "--set", f"front.metrics.port={metrics}",
            "--set", f"front.keys={keys}", "--set", "front.overlap=off", "--set", f"front.flip={flip}"]
    spec, url = SIM.front_spec, f"http://127.0.0.1:{public}"
    first = converge(spec, sets, SIM.first)
    assert first["ok"], first["error"]
    try:
        client = Client(url, KEY)
        client.start()
        time.sleep(2)
        while not any(outcome == "ok" for _, _, outcome in client.records):
            time.sleep(0.5)
        long = {}
        answer = threading.Thread(target=long_answer, args=(url, long), daemon=True)
        answer.start()
        time.sleep(1)  # it is being answered: the drain waits for it
        began = time.monotonic()
        document = converge(spec, sets, {**SIM.first, "server.env.DS4C_BENCH_SETTING": "restart"})
        ended = time.monotonic()
        time.sleep(2)
        client.done.set()
        client.join(timeout=1000)
        answer.join(timeout=600)
    finally:
        subprocess.run([sys.executable, "-m", "ds4_converge.cli", "stop", str(spec), *sets], capture_output=True,
                       timeout=300)
    said = json.dumps(document.get("roles"))
    drained = re.search(r"waited (\d+(?:\.\d+)?) s for \d+ request", said)
    ready = re.search(r"answered its smoke (\d+(?:\.\d+)?)s after its start", said)
    steady = statistics.median(lat for start, lat, outcome in client.records if outcome == "ok" and start < began)
    during = [r for r in client.records if r[0] + r[1] >= began and r[0] <= ended and r[2] != "failed"]
    added = max((lat - steady for _, lat, _ in during), default=0.0)
    drain_s = float(drained.group(1)) if drained else 0.0
    ready_s = float(ready.group(1)) if ready else float("nan")
    return {"flip": flip, "ok": document["ok"], "requests": len(client.records),
            "failed": sum(r[2] == "failed" for r in client.records), "long": long, "drain_s": drain_s,
            "ready_s": ready_s, "added_s": added, "target_s": drain_s + ready_s + 1.0, "switch_s": ended - began,
            "steady_s": steady}


def spark_report(rows: list[dict]) -> str:
    lines = [SPARK_HEADING, "",
             f"{machine()}; the simulated engine with a Spark's timings: a load of {SPARK_LOAD_S:g} s "
             f"(`DS4_SIM_LOAD_SECONDS`), `health.soak_s: {SPARK_SOAK_S:g}`, `front.overlap: off` (two engines never "
             f"fit on a Spark with the 80 GB model), one answer of {SPARK_ANSWER_S:g} s in flight when a restart "
             f"begins, and a client sending one request after another through the front door. Both flips side by "
             f"side in one run (`--spark`). Measured on the shared 2-core development machine while other test "
             f"suites ran: timings carry its noise (a quiet rerun belongs in this section).", "",
             "| front.flip | requests | failed | the long answer | drain | load + smoke (its start to its smoke) "
             "| target: drain + load + smoke + 1 s | a held request's added latency (max) | switch took | run |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        long = r["long"]
        answer = (f"failed: {long['failed']}" if "failed" in long
                  else f"{long.get('tokens')} tokens, {long['took_s']:.1f} s")
        lines.append(f"| {r['flip']} | {r['requests']} | {r['failed']} | {answer} | {r['drain_s']:.1f} s | "
                     f"{r['ready_s']:.1f} s | {r['target_s']:.1f} s | {r['added_s']:.1f} s | {r['switch_s']:.1f} s | "
                     f"{'ok' if r['ok'] else 'failed'} |")
    before, after = rows
    lines += ["", f"Held through the soak (`after-soak`, the road before this change) a request waited "
              f"{before['added_s']:.1f} s more than usual; flipped after the smoke (`after-smoke`, the default now) "
              f"{after['added_s']:.1f} s, against a target of {after['target_s']:.1f} s (the drain of the answer in "
              f"flight, the load and the smoke, and 1 s): {before['added_s'] - after['added_s']:.1f} s less, about "
              f"the soak. The rest is the drain (the {SPARK_ANSWER_S:g} s answer finishing), the stop and the load; "
              f"the soak goes on while the new engine serves, and a crash during it is reverted "
              f"(tests/e2e/test_front.py)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--real", action="store_true", help="the real engine serving --phantom instead")
    parser.add_argument("--phantom", type=Path, help="the GGUF the real engine serves (make_phantom_gguf.py)")
    parser.add_argument("--spark", action="store_true", help="the held road at a Spark's timings: front.flip "
                                                                 "after-soak against after-smoke")
    parser.add_argument("--no-report", action="store_true")
    args = parser.parse_args()
    if args.spark:
        with tempfile.TemporaryDirectory(prefix="ds4c-front-") as tmp:
            os.environ["XDG_CACHE_HOME"] = str(Path(tmp) / "user-cache")
            text = spark_report([spark_measure(flip, Path(tmp)) for flip in FLIPS])
        print(text)
        if not args.no_report:
            write_section(SPARK_HEADING, text)
        return
    if args.real and (args.phantom is None or not args.phantom.is_file()):
        parser.error("--real needs --phantom FILE, a GGUF the real engine loads")
    with tempfile.TemporaryDirectory(prefix="ds4c-front-") as tmp:
        work = Path(tmp)
        os.environ["XDG_CACHE_HOME"] = str(work / "user-cache")
        side = real_side(work, args.phantom) if args.real else SIM
        rows = [row for _, mode in MODES for row in measure(mode, work, side)]
    text = real_report(rows, args.phantom) if args.real else report(rows)
    print(text)
    if not args.no_report:
        write_section(REAL_HEADING if args.real else HEADING, text)


if __name__ == "__main__":
    main()
