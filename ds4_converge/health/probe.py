"""Health is a ladder: process alive → /v1/models lists the model → a smoke answer is right → it stays so.

ds4-server binds only after the model is loaded, so "connection refused" means "still loading" until the
deadline; a process that exits, a wrong model list or a wrong answer fail at once. A distributed coordinator
(b030961) binds before its workers have joined and answers every completion with HTTP 500 "distributed route
incomplete: missing layer N" (`dist_coordinator_build_route_plan()`) until they have: not ready yet either.
"""
from __future__ import annotations

import http.client
import json
import re
import socket
import time
from dataclasses import dataclass, field
from typing import Protocol

from ds4_converge.core.engine_http import request
from ds4_converge.engine_knowledge import load as load_knowledge
from ds4_converge.errors import Ds4Error
from ds4_converge.spec.model import Address, Smoke

MODEL_ID = load_knowledge()["model_id"]
NON_THINKING_MODEL = load_knowledge()["api"]["non_thinking_model"]


class NotReady(Ds4Error):
    """Temporary: try again until the deadline."""


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


class Unhealthy(Ds4Error):
    """Permanent: revert now. `detail`: the engine's own last lines, when it died."""


class EngineWatch(Protocol):
    """What the probe asks the supervisor about the engine it started."""

    def state(self) -> tuple[str, int | None, str]:
        """(statename, pid, supervisord's spawn error or "")"""

    def exits(self) -> list[str]:
        """How the engine ended since this start, each time: 'exit status 1', 'terminated by SIGKILL'."""

    def last_lines(self) -> str:
        """This start's last log lines (never an earlier start's), and where the whole log is."""

    def last_words(self) -> str:
        """The last line this start wrote: the engine's own reason, as a rule."""

    def log_text(self) -> str:
        """Everything this start wrote to the engine's log (a distributed worker's health is read there)."""


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
        state, pid, spawn_error = watch.state()
        if state not in ("RUNNING", "STARTING"):
            raise Unhealthy(_died(state, spawn_error, watch.exits(), watch.last_words()), watch.last_lines())
        self.first = self.first or pid
        if loading:
            # an engine that exits after supervisord's start window is started again, and again: it is never
            # BACKOFF or FATAL, only a new pid each time. One exit since this start is the crash it is.
            ended = watch.exits()
            if ended or (pid and self.first and pid != self.first):
                raise Unhealthy(_restarted(self.first, pid, ended, watch.last_words()), watch.last_lines())
        self.at, self.pid = time.monotonic(), pid
        return pid


def wait_healthy(target: ProbeTarget, watch: EngineWatch, *, soak: bool = True) -> int:
    """Return the PID that passed; raise Unhealthy saying how it failed, with the engine's own last lines.
    Without `soak`, it returns once the engine answers right (models, smoke plain and streamed, tool call):
    :func:`soak_engine` then watches it for health.soak_s, as the switch's held road does while it serves."""
    from tenacity import Retrying, retry_if_exception_type, stop_after_delay

    if target.worker is not None:
        from ds4_converge.health.worker import wait_worker

        return wait_worker(watch, watch.log_text, target.worker, deadline_s=target.deadline_s,
                           soak_s=target.soak_s if soak else 0)[0]

    started = time.monotonic()
    alive = _Alive(watch)

    def ready() -> int:
        pid = alive(loading=True)
        check_models(target.endpoint)
        if watch.state()[0] != "RUNNING":
            raise NotReady("answers, but supervisord has not counted it as started yet")
        return pid

    def pause(retry_state) -> float:
        # health.interval_s between probes that reach the engine; a port still closed is tried again soon
        refused = isinstance(retry_state.outcome.exception(), NotListening)
        return min(target.interval_s, LISTEN_POLL_S) if refused else target.interval_s

    retrying = Retrying(stop=stop_after_delay(target.deadline_s), wait=pause,
                        retry=retry_if_exception_type(NotReady), reraise=True)
    try:
        pid = retrying(ready)
    except NotReady as exc:
        raise Unhealthy(f"not ready within {target.deadline_s:.0f}s ({exc})") from None
    if target.coordinator is not None:
        _wait_route(target, watch, alive, started)
    elif target.smoke:
        remaining = max(30.0, target.deadline_s - (time.monotonic() - started))
        smoke_test(target.endpoint, target.smoke, timeout=remaining)
        streamed_smoke_test(target.endpoint, target.smoke, timeout=remaining)
        if target.speculative:
            speculative_test(target.endpoint, target.smoke, timeout=remaining)
    if target.tool_call:
        tool_call_test(target.endpoint, timeout=max(30.0, target.deadline_s - (time.monotonic() - started)))
    if soak:
        soak_engine(target, watch, pid)
    return pid


def soak_engine(target: ProbeTarget, watch: EngineWatch, pid: int) -> None:
    """The engine that answered right (pid `pid`) must stay up and answering for health.soak_s."""
    alive = _Alive(watch, pid)
    soak_until = time.monotonic() + target.soak_s
    while time.monotonic() < soak_until:
        time.sleep(min(target.interval_s, max(0.0, soak_until - time.monotonic())))
        try:
            now_pid = alive()
            check_models(target.endpoint)
            if now_pid != pid:
                raise NotReady(f"restarted (pid {pid} → {now_pid})")
        except (NotReady, Unhealthy) as exc:
            ended = _exits_of(watch, pid)
            if ended:  # it died and supervisord may have restarted it: a crash, not a slow load
                words = watch.last_words()
                raise Unhealthy(f"crashed during the {target.soak_s:.0f}s soak ({_times(ended)}; was pid {pid})"
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


def _wait_route(target: ProbeTarget, watch: EngineWatch, alive, started: float) -> None:
    """A coordinator is ready once its workers complete the route: its smoke answers (without a smoke, a one-token
    completion does; the real coordinator logs its route only with --debug). Until the deadline a missing layer
    is a worker still on its way, not a verdict."""
    while True:
        alive()
        try:
            remaining = max(30.0, target.deadline_s - (time.monotonic() - started))
            if target.smoke:
                smoke_test(target.endpoint, target.smoke, timeout=remaining)
            else:
                check_route(target.endpoint, timeout=remaining)
            return
        except RouteIncomplete as exc:
            missing = exc.missing_layer
        if time.monotonic() - started > target.deadline_s:
            raise Unhealthy(route_never_completed(missing, target.coordinator, target.deadline_s), watch.last_lines())
        time.sleep(target.interval_s)


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


def _died(state: str, spawn_error: str, ended: list[str], words: str) -> str:
    how = _times(ended) if ended else "no exit recorded"
    supervisor = f"supervisord: {state}" + (f", {spawn_error}" if spawn_error else "")
    return f"ds4-server exited ({how}; {supervisor})" + (f": {words}" if words else "")


def _restarted(first: int | None, pid: int | None, ended: list[str], words: str) -> str:
    how = _times(ended) if ended else "no exit recorded"
    return (f"ds4-server exited ({how}; supervisord started it again, pid {first} → {pid}: a crash loop, not a "
            f"slow load)") + (f": {words}" if words else "")


def _times(ended: list[str]) -> str:
    """'exit status 1', or 'exit status 1, 2 times' when supervisord retried it."""
    last = ended[-1]
    return last if len(ended) == 1 else f"{last}, {len(ended)} times"
