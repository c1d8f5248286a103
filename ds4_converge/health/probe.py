"""Health is a ladder: process alive → /v1/models lists the model → a smoke answer is right → it stays so.

ds4-server binds only after the model is loaded, so "connection refused" means "still loading" until the
deadline; a process that exits, a wrong model list or a wrong answer fail at once. A distributed coordinator
(b030961) binds before its workers have joined and answers every completion with HTTP 500 "distributed route
incomplete: missing layer N" (`dist_coordinator_build_route_plan()`) until they have: not ready yet either.

Each step is a rung (health/rungs.py): `ladder()` lists an HTTP engine's in order, `climb()` runs them over one
clock (health.deadline_s, one pause policy), and the soak is one more rung over a clock of health.soak_s. A
distributed worker has no HTTP API: its rungs are in health/worker.py.
"""
from __future__ import annotations

import http.client
import json
import re
import socket
import time
from dataclasses import dataclass, field
from functools import partial

from ds4_converge.core.engine_http import request
from ds4_converge.engine_knowledge import load as load_knowledge
from ds4_converge.health.rungs import Clock, EngineWatch, NotReady, Rung, Unhealthy, alive, climb, times
from ds4_converge.health.worker import wait_worker
from ds4_converge.spec.model import Address, Smoke

MODEL_ID = load_knowledge()["model_id"]
NON_THINKING_MODEL = load_knowledge()["api"]["non_thinking_model"]


class NotListening(NotReady):
    """Nothing accepts connections on the port yet: the engine is still loading."""


#: how soon a port that refused the connection is tried again: a refused connect costs the engine nothing, and the
#: engine binds only once loaded, so this is how late after its load a new engine is seen
LISTEN_POLL_S = 0.05
#: while the engine loads, supervisord is asked how it is at most this often; in between, the engine's own pid is
#: looked at (one read of /proc): two XML-RPC calls every LISTEN_POLL_S cost supervisord and the tool more CPU than
#: the engine can spare while it loads (on a small host they slowed the load down by a tenth of a second or more)
SUPERVISOR_POLL_S = 1.0


class RouteIncomplete(NotReady):
    """A distributed coordinator whose workers do not cover every layer yet: it waits for them."""

    def __init__(self, missing_layer: int):
        super().__init__(f"distributed route incomplete: missing layer {missing_layer}")
        self.missing_layer = missing_layer


#: the coordinator's words for a completion it cannot route (ds4_distributed.c), inside an HTTP 500
ROUTE_INCOMPLETE = re.compile(r"distributed route incomplete: missing layer (\d+)")


@dataclass(frozen=True)
class ProbeTarget:
    endpoint: str  # http://HOST:PORT
    deadline_s: float
    soak_s: float
    interval_s: float
    smoke: Smoke | None
    worker: Address | None = None  # a distributed worker's data port: no HTTP API, health from log and port
    coordinator: Address | None = None  # a distributed coordinator's --listen: where its workers must connect
    tool_call: bool = False  # health.tool_call: a tools request must come back as structured tool_calls
    speculative: bool = False  # speculation on: the smoke again at concurrency >= 2 and temperature > 0


def check_models(endpoint: str, timeout: float = 10) -> dict:
    try:
        status, text = request(endpoint, "GET", "/v1/models", timeout)
    except (socket.timeout, TimeoutError):
        raise NotReady("/v1/models timed out") from None
    except (ConnectionError, OSError, http.client.HTTPException):
        raise NotListening("not listening yet (loading)") from None
    if status != 200:
        raise NotReady(f"/v1/models answered {status}")
    try:
        document = json.loads(text)
        ids = [m["id"] for m in document["data"]]
    except (ValueError, KeyError, TypeError):
        raise Unhealthy(f"/v1/models answered 200 without a model list: {text[:200]!r}") from None
    if MODEL_ID not in ids:
        raise Unhealthy(f"/v1/models lists {ids}, not {MODEL_ID}")
    return document


def smoke_test(endpoint: str, smoke: Smoke, timeout: float) -> str:
    """One short non-streamed completion with thinking off; the answer must contain the expected text."""
    body = {"model": NON_THINKING_MODEL, "messages": [{"role": "user", "content": smoke.prompt}],
            "max_tokens": smoke.max_tokens, "stream": False, "temperature": 0,
            "thinking": {"type": "disabled"}}
    try:
        status, text = request(endpoint, "POST", "/v1/chat/completions", timeout, body)
        incomplete = ROUTE_INCOMPLETE.search(text) if status == 500 else None
        if incomplete:
            raise RouteIncomplete(int(incomplete.group(1)))
        if status != 200:
            raise Unhealthy(f"smoke completion failed: HTTP {status}: {text[:200]!r}")
        content = json.loads(text)["choices"][0]["message"].get("content") or ""
    except (OSError, http.client.HTTPException, ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise Unhealthy(f"smoke completion failed: {exc}") from None
    if smoke.expect.lower() not in content.lower():
        raise Unhealthy(f"smoke answer {content.strip()[:120]!r} does not contain {smoke.expect!r}")
    return content


@dataclass
class Streamed:
    """What a streamed chat completion carried, its deltas joined: what an agent's client puts together."""

    content: str = ""
    reasoning: str = ""
    tool_calls: dict = field(default_factory=dict)  # index -> {"name", "arguments"}
    done: bool = False  # the stream ended with `data: [DONE]`

    def message(self) -> dict:
        calls = [{"type": "function", "function": call} for _, call in sorted(self.tool_calls.items())]
        return {"content": self.content, "reasoning_content": self.reasoning, "tool_calls": calls}


def read_stream(text: str) -> Streamed:
    """The server-sent events of an OpenAI chat stream, read whole. Raises ValueError for a chunk that is not
    JSON or an error event."""
    found = Streamed()
    for line in text.splitlines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            found.done = True
            break
        chunk = json.loads(data)
        if "error" in chunk:
            raise ValueError(f"the stream carried an error: {data[:200]}")
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            found.content += delta.get("content") or ""
            found.reasoning += delta.get("reasoning_content") or ""
            for call in delta.get("tool_calls") or []:
                entry = found.tool_calls.setdefault(call.get("index", 0), {"name": "", "arguments": ""})
                function = call.get("function") or {}
                entry["name"] += function.get("name") or ""
                entry["arguments"] += function.get("arguments") or ""
    return found


def stream_chat(endpoint: str, body: dict, timeout: float, what: str) -> Streamed:
    """`body` asked with `stream: true`, as agents ask; its deltas joined. Raises Unhealthy saying `what` failed."""
    try:
        status, text = request(endpoint, "POST", "/v1/chat/completions", timeout, {**body, "stream": True})
        if status != 200:
            raise Unhealthy(f"{what} failed: HTTP {status}: {text[:200]!r}")
        found = read_stream(text)
    except (OSError, http.client.HTTPException, ValueError, TypeError, AttributeError) as exc:
        raise Unhealthy(f"{what} failed: {exc}") from None
    if not found.done:
        raise Unhealthy(f"{what}: the stream ended without `data: [DONE]`")
    return found


def streamed_smoke_test(endpoint: str, smoke: Smoke, timeout: float) -> str:
    """The smoke again with `stream: true`: the expected text must come in the deltas' `content`, where a client
    shows it (in `reasoning_content` only, or nowhere, an agent sees an empty answer)."""
    body = {"model": NON_THINKING_MODEL, "messages": [{"role": "user", "content": smoke.prompt}],
            "max_tokens": smoke.max_tokens, "temperature": 0, "thinking": {"type": "disabled"}}
    found = stream_chat(endpoint, body, timeout, "streamed smoke completion")
    if smoke.expect.lower() not in found.content.lower():
        where = (f"; only in reasoning_content: {found.reasoning.strip()[:80]!r}"
                 if smoke.expect.lower() in found.reasoning.lower() else "")
        raise Unhealthy(f"streamed smoke answer {found.content.strip()[:120]!r} (its `content`) does not contain "
                        f"{smoke.expect!r}{where}")
    return found.content


TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "the city"}},
                   "required": ["city"]}}}


TOOL_QUESTION = "What is the weather in Paris? Use the get_weather tool."


def tool_call_test(endpoint: str, timeout: float) -> dict:
    """A request with a tools definition, asked plain and then streamed (as agents ask): each answer must be a
    structured tool_calls entry naming the function, its arguments a JSON object. DSML (DeepSeek V4's tool-call
    markup) in the content means the runtime did not parse it: an agent would see text, never a call."""
    body = {"model": NON_THINKING_MODEL, "stream": False, "temperature": 0, "max_tokens": 256,
            "thinking": {"type": "disabled"}, "tools": [TOOL],
            "messages": [{"role": "user", "content": TOOL_QUESTION}]}
    try:
        status, text = request(endpoint, "POST", "/v1/chat/completions", timeout, body)
        if status != 200:
            raise Unhealthy(f"tool-call smoke failed: HTTP {status}: {text[:200]!r}")
        message = json.loads(text)["choices"][0]["message"]
    except (OSError, http.client.HTTPException, ValueError, KeyError, IndexError, TypeError) as exc:
        raise Unhealthy(f"tool-call smoke failed: {exc}") from None
    call = judge_tool_call(message, "tool-call smoke")
    judge_tool_call(stream_chat(endpoint, body, timeout, "streamed tool-call smoke").message(),
                    "streamed tool-call smoke")
    return call


def judge_tool_call(message: dict, what: str) -> dict:
    """The first tool call of an answer's message, or Unhealthy saying what came instead."""
    calls = message.get("tool_calls") or []
    if not calls:
        content = (message.get("content") or "").strip()
        kind = "DSML as text (the runtime did not parse it)" if "DSML" in content or "invoke" in content \
            else "text, no tool_calls" if content else "empty: no tool_calls, no content"
        raise Unhealthy(f"{what}: the answer is {kind}: {content[:160]!r}")
    function = calls[0].get("function") or {}
    if function.get("name") != TOOL["function"]["name"]:
        raise Unhealthy(f"{what}: the call names {function.get('name')!r}, not get_weather")
    try:
        arguments = json.loads(function.get("arguments") or "")
    except (TypeError, ValueError):
        arguments = None
    if not isinstance(arguments, dict):
        raise Unhealthy(f"{what}: the arguments are not a JSON object: {function.get('arguments')!r}")
    return calls[0]


#: speculation (MTP, DSpark) that corrupts output shows under concurrency and sampling, not in one greedy request
SPECULATIVE_REQUESTS, SPECULATIVE_CONCURRENCY, SPECULATIVE_TEMPERATURE = 4, 2, 0.7


def speculative_test(endpoint: str, smoke: Smoke, timeout: float) -> None:
    """The smoke again, SPECULATIVE_REQUESTS times, two at a time, sampled: each answer must still be right."""
    from concurrent.futures import ThreadPoolExecutor

    def one(_):
        body = {"model": NON_THINKING_MODEL, "messages": [{"role": "user", "content": smoke.prompt}],
                "max_tokens": smoke.max_tokens, "stream": False, "temperature": SPECULATIVE_TEMPERATURE,
                "thinking": {"type": "disabled"}}
        try:
            status, text = request(endpoint, "POST", "/v1/chat/completions", timeout, body)
            content = json.loads(text)["choices"][0]["message"].get("content") or "" if status == 200 else None
        except (OSError, http.client.HTTPException, ValueError, KeyError, IndexError, TypeError) as exc:
            return f"failed: {exc}"
        if content is None:
            return f"HTTP {status}: {text[:120]!r}"
        return None if smoke.expect.lower() in content.lower() else f"answered {content.strip()[:120]!r}"

    with ThreadPoolExecutor(SPECULATIVE_CONCURRENCY) as pool:
        wrong = [w for w in pool.map(one, range(SPECULATIVE_REQUESTS)) if w]
    if wrong:
        raise Unhealthy(f"with speculation on, {len(wrong)} of {SPECULATIVE_REQUESTS} smoke requests at concurrency "
                        f"{SPECULATIVE_CONCURRENCY} and temperature {SPECULATIVE_TEMPERATURE} went wrong "
                        f"(expected {smoke.expect!r}): {wrong[0]}")


class _Alive:
    """Is the engine of this start still up? Its pid is read from /proc between supervisord's answers (at most
    every SUPERVISOR_POLL_S), and `loading`: one exit since the start, or a new pid, is a crash loop."""

    def __init__(self, watch: EngineWatch, pid: int | None = None):
        self.watch, self.pid, self.first, self.at = watch, pid, pid, float("-inf")

    def __call__(self, *, loading: bool = False) -> int:
        if self.pid and time.monotonic() - self.at < SUPERVISOR_POLL_S and _running(self.pid):
            return self.pid
        watch = self.watch
        pid = alive(watch)
        self.first = self.first or pid
        if loading:
            # an engine that exits after supervisord's start window is started again, and again: it is never
            # BACKOFF or FATAL, only a new pid each time. One exit since this start is the crash it is.
            ended = watch.exits()
            if ended or (pid and self.first and pid != self.first):
                raise Unhealthy(_restarted(self.first, pid, ended, watch.last_words()), watch.last_lines())
        self.at, self.pid = time.monotonic(), pid
        return pid


@dataclass
class Engine:
    """What an HTTP engine's rungs ask about: the engine of this start, at its endpoint, as its watch sees it."""

    target: ProbeTarget
    watch: EngineWatch
    alive: _Alive
    pid: int | None = None  # the pid that listed its model: the one the soak watches


def ladder(engine: Engine) -> list[Rung]:
    """The rungs an HTTP engine climbs before it may serve, in order (the soak follows: soak_engine)."""
    target = engine.target
    rungs = [Rung("models listed", partial(models_listed, engine), waits=True)]
    if target.coordinator is not None:
        rungs.append(Rung("route", partial(route, engine), waits=True, late=partial(_route_late, engine)))
    elif target.smoke:
        rungs += [Rung("smoke", partial(smoke, engine)), Rung("streamed smoke", partial(streamed_smoke, engine))]
        if target.speculative:
            rungs.append(Rung("speculation", partial(speculation, engine)))
    if target.tool_call:
        rungs.append(Rung("tool call", partial(tool_call, engine)))
    return rungs


def pause(target: ProbeTarget, why: NotReady | None) -> float:
    """health.interval_s between probes that reach the engine; a port still closed is tried again soon."""
    return min(target.interval_s, LISTEN_POLL_S) if isinstance(why, NotListening) else target.interval_s


def wait_healthy(target: ProbeTarget, watch: EngineWatch, *, soak: bool = True) -> int:
    """Return the PID that passed; raise Unhealthy saying how it failed, with the engine's own last lines.
    Without `soak`, it returns once the engine answers right (models, smoke plain and streamed, tool call):
    :func:`soak_engine` then watches it for health.soak_s, as the switch's held road does while it serves."""
    if target.worker is not None:
        return wait_worker(watch, watch.log_text, target.worker, deadline_s=target.deadline_s,
                           soak_s=target.soak_s if soak else 0)[0]
    engine = Engine(target, watch, _Alive(watch))
    climb(ladder(engine), Clock(target.deadline_s, partial(pause, target)))
    if soak:
        soak_engine(target, watch, engine.pid)
    return engine.pid


def soak_engine(target: ProbeTarget, watch: EngineWatch, pid: int) -> None:
    """The engine that answered right (pid `pid`) must stay up and answering for health.soak_s."""
    engine = Engine(target, watch, _Alive(watch, pid), pid)
    climb([Rung("soak", partial(soaked, engine), holds=True)], Clock(target.soak_s, partial(pause, target)))


def models_listed(engine: Engine, clock: Clock) -> None:
    """Alive (an exit since its start is a crash loop, not a slow load), /v1/models lists the model, and
    supervisord counts it as started."""
    pid = engine.alive(loading=True)
    check_models(engine.target.endpoint)
    if engine.watch.state()[0] != "RUNNING":
        raise NotReady("answers, but supervisord has not counted it as started yet")
    engine.pid = pid


def smoke(engine: Engine, clock: Clock) -> None:
    smoke_test(engine.target.endpoint, engine.target.smoke, timeout=clock.timeout())


def streamed_smoke(engine: Engine, clock: Clock) -> None:
    streamed_smoke_test(engine.target.endpoint, engine.target.smoke, timeout=clock.timeout())


def speculation(engine: Engine, clock: Clock) -> None:
    speculative_test(engine.target.endpoint, engine.target.smoke, timeout=clock.timeout())


def tool_call(engine: Engine, clock: Clock) -> None:
    tool_call_test(engine.target.endpoint, timeout=clock.timeout())


def route(engine: Engine, clock: Clock) -> None:
    """A coordinator is ready once its workers complete the route: its smoke answers (without a smoke, a one-token
    completion does; the real coordinator logs its route only with --debug). Until the deadline a missing layer
    (RouteIncomplete) is a worker still on its way, not a verdict."""
    engine.alive()
    if engine.target.smoke:
        smoke_test(engine.target.endpoint, engine.target.smoke, timeout=clock.timeout())
    else:
        check_route(engine.target.endpoint, timeout=clock.timeout())


def _route_late(engine: Engine, exc: RouteIncomplete, clock: Clock) -> Unhealthy:
    return Unhealthy(route_never_completed(exc.missing_layer, engine.target.coordinator, clock.deadline_s),
                     engine.watch.last_lines())


def soaked(engine: Engine, clock: Clock) -> None:
    """Still the engine that answered (pid `engine.pid`), still answering; when it stopped, a crash is told as one."""
    target, watch, pid = engine.target, engine.watch, engine.pid
    try:
        now_pid = engine.alive()
        check_models(target.endpoint)
        if now_pid != pid:
            raise NotReady(f"restarted (pid {pid} → {now_pid})")
    except (NotReady, Unhealthy) as exc:
        ended = _exits_of(watch, pid)
        if ended:  # it died and supervisord may have restarted it: a crash, not a slow load
            words = watch.last_words()
            raise Unhealthy(f"crashed during the {target.soak_s:.0f}s soak ({times(ended)}; was pid {pid})"
                            + (f": {words}" if words else ""), watch.last_lines()) from None
        raise Unhealthy(f"stopped answering during the {target.soak_s:.0f}s soak: {exc}",
                        getattr(exc, "detail", "")) from None


#: supervisord writes an exit to its log within its own tick (about a second) of the process's end
EXIT_RECORDED_S = 3.0


def _exits_of(watch: EngineWatch, pid: int) -> list[str]:
    """How the engine ended since its start; when its process is gone but supervisord has not logged it yet (the
    port closed first), waited for up to EXIT_RECORDED_S: a crash is reported as one."""
    ended = watch.exits()
    deadline = time.monotonic() + EXIT_RECORDED_S
    while not ended and not _running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
        ended = watch.exits()
    return ended


def check_route(endpoint: str, timeout: float = 30) -> None:
    """A running coordinator's route, as a client meets it: one one-token completion (status asks this; the real
    coordinator says nothing in its log about workers joining or leaving unless run with --debug)."""
    smoke_test(endpoint, Smoke.model_construct(prompt="Hi", expect="", max_tokens=1), timeout=timeout)


def route_never_completed(missing: int, listen: Address, deadline_s: float) -> str:
    return (f"the distributed route was not complete within {deadline_s:.0f}s: layers {missing} onwards never "
            f"arrived; the worker whose range starts at layer {missing} (--layers {missing}:…) never joined this "
            f"coordinator on {listen} (start it first; its distributed.coordinator must be {listen})")


def _running(pid: int) -> bool:
    """The process exists and has not exited (a zombie waits for supervisord to reap it: it has exited)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _restarted(first: int | None, pid: int | None, ended: list[str], words: str) -> str:
    how = times(ended) if ended else "no exit recorded"
    return (f"ds4-server exited ({how}; supervisord started it again, pid {first} → {pid}: a crash loop, not a "
            f"slow load)") + (f": {words}" if words else "")
