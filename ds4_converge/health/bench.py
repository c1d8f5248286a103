"""How fast the running engine is, measured over HTTP as a client sees it (`ds4-converge bench`).

Each request streams a chat completion with thinking off, behind a fresh random prefix so that the KV cache
of an earlier request cannot flatter it, and asks for an answer longer than `max_tokens` so that decoding
runs the whole budget:

- TTFT: time to the first content chunk, not to the first byte (the engine sends its headers, and a
  `: prefill` comment every 5 s, before the first token);
- prefill tok/s: uncached prompt tokens / TTFT;
- decode tok/s: (completion tokens - 1) / (last content chunk - first content chunk); with N clients at
  once, also the aggregate: all completion tokens / the round's wall time.

The fork's own `timings` (engine-side rates, speculative acceptance, tokens per step) and `/v1/stats` are
recorded beside when it sends them. Results are appended as JSON lines to ROOT/bench/results.jsonl,
keyed by release and configuration.
"""
from __future__ import annotations

import http.client
import json
import random
import statistics
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from hashlib import sha256
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

from ds4_converge.core import bounded_file
from ds4_converge.health.probe import check_models

NEAR_CTX = "ctx"
NEAR_CTX_FRACTION = 0.9  # the engine refuses a prompt of ctx tokens or more; leave room for the answer
# short common English words: one token each for most tokenizers, DeepSeek's included
WORDS = ("time year people way day man thing woman life child world school state family student group country "
         "problem hand part place case week company system program question work government number night "
         "point home water room mother area money story fact month lot right study book eye job word business "
         "issue side kind head house service friend father power hour game line end member law car city "
         "community name president team minute idea kid body information back parent face others level office "
         "door health person art war history party result change morning reason research girl guy moment air "
         "teacher force education river stone light music garden window bread table paper").split()


class BenchError(Exception):
    """The engine did not answer a bench request as expected."""


@dataclass(frozen=True)
class Case:
    prompt_tokens: int  # what we aim for; the engine's count is recorded
    concurrency: int = 1
    near_ctx: bool = False

    @property
    def label(self) -> str:
        size = f"{self.prompt_tokens} (near ctx)" if self.near_ctx else str(self.prompt_tokens)
        return f"{size} x{self.concurrency}"


@dataclass(frozen=True)
class BenchOptions:
    prompt_tokens: tuple = (512, 5500, NEAR_CTX)  # ints, or NEAR_CTX for one prompt near the context size
    concurrency: int = 4  # N: the shortest prompt is also run with N clients at once (1: not)
    reps: int = 3
    gen_tokens: int = 128
    timeout_s: float = 600  # one read; the engine sends a `: prefill` comment every 5 s while it prefills


@dataclass
class Sample:
    """One streamed request."""

    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    ttft_s: float
    decode_tps: float | None
    total_s: float
    engine: dict = field(default_factory=dict)  # the fork's `timings`

    @property
    def prefill_tps(self) -> float | None:
        uncached = self.prompt_tokens - self.cached_tokens
        return uncached / self.ttft_s if uncached > 0 and self.ttft_s > 0 else None


def cases(options: BenchOptions, ctx_tokens: int) -> list[Case]:
    found = []
    for size in options.prompt_tokens:
        if size == NEAR_CTX:
            found.append(Case(int(ctx_tokens * NEAR_CTX_FRACTION) - options.gen_tokens, 1, near_ctx=True))
        elif int(size) + options.gen_tokens < ctx_tokens:
            found.append(Case(int(size)))
    if options.concurrency > 1 and found:
        shortest = min(found, key=lambda c: c.prompt_tokens)
        found.append(Case(shortest.prompt_tokens, options.concurrency, shortest.near_ctx))
    return found


# ------------------------------------------------------------------------------------------- one request


def filler(words: int, rng: random.Random) -> str:
    """A system prompt of about `words` tokens that starts with a prefix no earlier request had."""
    return f"Session {uuid.uuid4().hex}. " + " ".join(rng.choice(WORDS) for _ in range(max(words, 0)))


def request_body(messages: list[dict], max_tokens: int) -> dict:
    return {"model": "deepseek-chat", "messages": messages, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}, "temperature": 0, "thinking": {"type": "disabled"}}


def bench_messages(words: int, gen_tokens: int, rng: random.Random) -> list[dict]:
    # an answer longer than the budget: decoding runs all gen_tokens
    return [{"role": "system", "content": filler(words, rng)},
            {"role": "user", "content": f"Count from 1 to {gen_tokens * 4}, separated by spaces."}]


def stream(endpoint: str, body: dict, timeout: float) -> Sample:
    """POST one streamed chat completion and time its chunks."""
    url = urlsplit(endpoint)
    conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=timeout)
    started = time.monotonic()
    first = last = None
    chunks, usage, timings = 0, None, {}
    try:
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(),
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        if response.status != 200:
            raise BenchError(_error_text(response.status, response.read()))
        event = None
        for raw in response:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if line.startswith("event:"):
                event = line[6:].strip()
                continue
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if event == "error" or "error" in chunk:
                raise BenchError(f"the stream ended with an error: {data[:200]}")
            if chunk.get("usage"):
                usage, timings = chunk["usage"], chunk.get("timings") or {}
            for choice in chunk.get("choices") or []:
                if (choice.get("delta") or {}).get("content"):
                    now = time.monotonic()
                    first = first or now
                    last = now
                    chunks += 1
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise BenchError(f"bench request failed: {exc}") from None
    finally:
        conn.close()
    if first is None:
        raise BenchError("the stream carried no content")
    completion = (usage or {}).get("completion_tokens") or chunks
    prompt = (usage or {}).get("prompt_tokens") or 0
    cached = ((usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    decode = (completion - 1) / (last - first) if completion > 1 and last > first else None
    return Sample(prompt, cached, completion, first - started, decode, time.monotonic() - started, timings)


def _error_text(status: int, body: bytes) -> str:
    try:
        error = json.loads(body)["error"]
        return f"HTTP {status}: {error.get('message')}" + (f" ({error['code']})" if error.get("code") else "")
    except (ValueError, KeyError, TypeError):
        return f"HTTP {status}: {body[:200]!r}"


# ------------------------------------------------------------------------------------------- one case


def spread(values: list[float | None], digits: int = 3) -> dict | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits),
            "max": round(max(values), digits)}


CALIBRATION_WORDS = 32


def tokens_per_word(endpoint: str, options: BenchOptions, rng: random.Random) -> float:
    """How many tokens this engine's tokenizer makes of one filler word, from one untimed 1-token request.

    Most tokenizers make one token of each filler word; a model with another vocabulary (a byte-level test
    model makes five) would otherwise get prompts several times the target, past the context size."""
    short, long = (stream(endpoint, request_body(bench_messages(words, 1, rng), 1), options.timeout_s)
                   for words in (1, CALIBRATION_WORDS + 1))
    per_word = (long.prompt_tokens - short.prompt_tokens) / CALIBRATION_WORDS
    return per_word if per_word > 0 else 1.0


#: clients' requests on the benched engine as its front door counts them: (in flight now, ever); None: unknown
Traffic = Callable[[], "tuple[int, int] | None"]
#: a round that met clients' requests is run again, at most this many times; then it is kept, and named
REDO_ROUNDS = 6
QUIET_WAIT_S, QUIET_POLL_S = 10.0, 0.02


@dataclass
class Alone:
    """Whether the rounds ran with the engine alone (a front door's stats say; without one, nobody knows)."""

    checked: bool = False
    redone: int = 0  # rounds run again because clients' requests were in flight
    contaminated: list[str] = field(default_factory=list)  # rounds kept anyway, named: "512 x1 round 2"
    rounds: list[tuple[float, float]] = field(default_factory=list)  # (start, end), time.time(), each kept round

    def as_record(self) -> dict:
        return {"checked": self.checked, "redone": self.redone, "contaminated": self.contaminated,
                "rounds": [[round(a, 3), round(b, 3)] for a, b in self.rounds]}


def _quiet(traffic: Traffic) -> tuple[int, int] | None:
    """Wait (bounded) until no client's request is in flight; the counts then."""
    deadline = time.monotonic() + QUIET_WAIT_S
    seen = traffic()
    while seen is not None and seen[0] and time.monotonic() < deadline:
        time.sleep(QUIET_POLL_S)
        seen = traffic()
    return seen


def alone_round(run, traffic: Traffic | None, alone: Alone, name: str):
    """run() in a moment without clients' requests: started once none is in flight, and run again when one
    came meanwhile (the front door's count of requests moved), at most REDO_ROUNDS times; a round that never
    found a quiet moment is kept and named in `alone`, never averaged in silently."""
    for attempt in range(REDO_ROUNDS + 1):
        before = _quiet(traffic) if traffic is not None else None
        started = time.time()
        result = run()
        ended = time.time()
        after = traffic() if before is not None else None
        if before is None or after is None:
            alone.rounds.append((started, ended))
            return result
        alone.checked = True
        if not before[0] and after == before:
            alone.rounds.append((started, ended))
            return result
        if attempt == REDO_ROUNDS:
            alone.contaminated.append(name)
            alone.rounds.append((started, ended))
            return result
        alone.redone += 1


def run_case(endpoint: str, case: Case, options: BenchOptions, rng: random.Random,
             per_word: float = 1.0, traffic: Traffic | None = None, alone: Alone | None = None) -> dict:
    """`reps` rounds of `concurrency` simultaneous requests, each behind its own fresh prefix; with `traffic`,
    each round with the engine alone (:func:`alone_round`)."""
    # the chat template and the question take some tokens
    words = max(int((case.prompt_tokens - 40) / per_word), 1)
    samples: list[Sample] = []
    aggregate: list[float] = []
    alone = alone if alone is not None else Alone()
    for rep in range(options.reps):
        def one_round():
            bodies = [request_body(bench_messages(words, options.gen_tokens, rng), options.gen_tokens)
                      for _ in range(case.concurrency)]
            started = time.monotonic()
            with ThreadPoolExecutor(case.concurrency) as pool:
                found = list(pool.map(lambda b: stream(endpoint, b, options.timeout_s), bodies))
            return found, time.monotonic() - started

        round_samples, wall = alone_round(one_round, traffic, alone, f"{case.label} round {rep + 1}")
        samples += round_samples
        aggregate.append(sum(s.completion_tokens for s in round_samples) / wall)
        # aim the next round at the target: the engine's token count calibrates our words-per-token guess
        measured = statistics.median(s.prompt_tokens for s in round_samples)
        if measured:
            words = max(int(words * case.prompt_tokens / measured), 1)
    engine = [s.engine for s in samples if s.engine]
    return {
        "case": case.label, "prompt_tokens_target": case.prompt_tokens, "near_ctx": case.near_ctx,
        "concurrency": case.concurrency, "requests": len(samples),
        "prompt_tokens": int(statistics.median(s.prompt_tokens for s in samples)),
        "cached_tokens": max(s.cached_tokens for s in samples),
        "completion_tokens": int(statistics.median(s.completion_tokens for s in samples)),
        "ttft_s": spread([s.ttft_s for s in samples]),
        "prefill_tps": spread([s.prefill_tps for s in samples], 1),
        "decode_tps": spread([s.decode_tps for s in samples], 2),
        "aggregate_tps": spread(aggregate, 2),
        "engine": {
            "ttft_s": spread([e["ttft_ms"] / 1000 for e in engine if e.get("ttft_ms") is not None]),
            "prefill_tps": spread([e.get("prefill_tok_s") for e in engine], 1),
            "decode_tps": spread([e.get("decode_tok_s") for e in engine], 2),
            "spec_accept_rate": spread([e.get("spec_accept_rate") for e in engine]),
            "tok_per_step": spread([e.get("tok_per_step") for e in engine]),
        } if engine else None,
    }


def engine_stats(endpoint: str) -> dict | None:
    """The fork's /v1/stats (60 s rates, speculative acceptance, banks); None where there is none (upstream)."""
    url = urlsplit(endpoint)
    conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=10)
    try:
        conn.request("GET", "/v1/stats", headers={"Accept": "application/json"})
        response = conn.getresponse()
        body = response.read()
        return json.loads(body) if response.status == 200 else None
    except (OSError, http.client.HTTPException, ValueError):
        return None
    finally:
        conn.close()


def measure(endpoint: str, options: BenchOptions, say=lambda _m: None, traffic: Traffic | None = None,
            alone: Alone | None = None) -> tuple[list[dict], dict | None]:
    """Every case against `endpoint` (which must already answer /v1/models): (case summaries, /v1/stats).
    `traffic`: clients' requests on that engine (a front door's count): each round runs with the engine alone."""
    models = check_models(endpoint)
    ctx_tokens = int(models["data"][0].get("context_length") or 32768)
    rng = random.Random()
    per_word = tokens_per_word(endpoint, options, rng)
    results = []
    for case in cases(options, ctx_tokens):
        say(f"bench: {case.label}: {options.reps} round(s) of {case.concurrency} request(s), "
            f"{options.gen_tokens} tokens each")
        results.append(run_case(endpoint, case, options, rng, per_word, traffic, alone))
    return results, engine_stats(endpoint)


# ------------------------------------------------------------------------------------------- records


def config_of(command: list[str]) -> dict:
    """What decides speed, read from the engine's exact command line."""

    def value(*flags: str) -> str | None:
        found = None
        for index, arg in enumerate(command[:-1]):
            if arg in flags:
                found = command[index + 1]  # the engine takes the last occurrence
        return found

    if "--mtp" in command:
        speculative = f"mtp draft {value('--mtp-draft') or 1}"
    elif "--dspark" in command:
        speculative = "dspark"
    else:
        speculative = "off"
    model = value("-m", "--model")
    return {"speculative": speculative, "power": int(value("--power") or 100), "ctx": int(value("-c", "--ctx") or 0),
            "model": Path(model).name if model else None}


def config_label(config: dict) -> str:
    return f"speculative {config['speculative']}, power {config['power']}"


def make_record(*, kind: str, release: str | None, command: list[str], program_conf: str, endpoint: str,
                options: BenchOptions, results: list[dict], stats: dict | None) -> dict:
    config = config_of(command)
    program = sha256(program_conf.encode()).hexdigest()[:12] if program_conf else None
    return {"at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "kind": kind, "release": release,
            "config": config, "program": program, "key": f"{release} | {config_label(config)}",
            "endpoint": endpoint, "reps": options.reps, "gen_tokens": options.gen_tokens, "cases": results,
            "stats": stats}


def append(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")


HISTORY_BYTES = 64 << 20  # the newest records of a results file every bench appends to (each a few KiB)


def history(path: Path) -> list[dict]:
    """The records of the results file, oldest first, as many as its last HISTORY_BYTES hold (it only grows); a
    torn last line (a run killed mid-write) is skipped, and so is a special file."""
    try:
        lines = bounded_file.read_tail(path, HISTORY_BYTES).decode(
            "utf-8", "replace").splitlines()
    except OSError:
        return []
    records = []
    for line in lines:
        try:
            records.append(bounded_file.load_json(line))
        except ValueError:
            continue
    return records


def latest_per_key(records: list[dict]) -> list[dict]:
    latest: dict[str, dict] = {}
    for record in records:
        latest[record.get("key", "?")] = record
    return list(latest.values())


def headline(record: dict) -> float | None:
    """The one number a configuration is ranked by: median decode tok/s of one client on the shortest prompt."""
    singles = [c for c in record["cases"] if c["concurrency"] == 1 and c.get("decode_tps")]
    if not singles:
        return None
    return min(singles, key=lambda c: c["prompt_tokens_target"])["decode_tps"]["median"]


def bench(ctx, options: BenchOptions, current, endpoint: str, *, kind: str = "bench", say=lambda _m: None,
          traffic: Traffic | None = None) -> dict:
    """Bench `current` (the Deployment that runs, as it was started; None: not known) on `endpoint` for `ctx`'s
    spec, append the record under root, and return it. `traffic`: clients' requests on that engine, from its
    front door (the record's `alone` says what the rounds met)."""
    from ds4_converge.health.platform import Sampler

    endpoint = current.endpoint if current and current.endpoint else endpoint  # what runs, as it was started
    alone = Alone()
    with Sampler() as gpu:  # clocks, power, throttle reasons and tenants while it runs (health/platform.py)
        results, stats = measure(endpoint, options, say, traffic, alone)
    record = make_record(kind=kind, release=current.release if current else None,
                         command=current.command if current else [], endpoint=endpoint,
                         program_conf=current.program_conf if current else "", options=options,
                         results=results, stats=stats)
    record["platform"] = gpu.record()
    record["alone"] = alone.as_record()
    append(ctx.layout.bench_results, record)
    return record
