"""Health is a ladder: process alive → /v1/models lists the model → a smoke answer is right → it stays so.

ds4-server binds only after the model is loaded, so "connection refused" means "still loading" until the
deadline; a process that exits, a wrong model list or a wrong answer fail at once.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import requests
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

from ds4_converge.engine_knowledge import load as load_knowledge
from ds4_converge.spec.model import Smoke

MODEL_ID = load_knowledge()["model_id"]
NON_THINKING_MODEL = load_knowledge()["api"]["non_thinking_model"]


class NotReady(Exception):
    """Temporary: try again until the deadline."""


class Unhealthy(Exception):
    """Permanent: revert now. `detail`: the engine's own last lines, when it died."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail


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


@dataclass(frozen=True)
class ProbeTarget:
    endpoint: str  # http://HOST:PORT
    deadline_s: float
    soak_s: float
    interval_s: float
    smoke: Smoke | None


def check_models(endpoint: str, timeout: float = 10) -> dict:
    try:
        response = requests.get(f"{endpoint}/v1/models", timeout=timeout)
    except requests.ConnectionError:
        raise NotReady("not listening yet (loading)") from None
    except requests.Timeout:
        raise NotReady("/v1/models timed out") from None
    if response.status_code != 200:
        raise NotReady(f"/v1/models answered {response.status_code}")
    try:
        ids = [m["id"] for m in response.json()["data"]]
    except (ValueError, KeyError, TypeError):
        raise Unhealthy(f"/v1/models answered 200 without a model list: {response.text[:200]!r}") from None
    if MODEL_ID not in ids:
        raise Unhealthy(f"/v1/models lists {ids}, not {MODEL_ID}")
    return response.json()


def smoke_test(endpoint: str, smoke: Smoke, timeout: float) -> str:
    """One short non-streamed completion with thinking off; the answer must contain the expected text."""
    body = {"model": NON_THINKING_MODEL, "messages": [{"role": "user", "content": smoke.prompt}],
            "max_tokens": smoke.max_tokens, "stream": False, "temperature": 0,
            "thinking": {"type": "disabled"}}
    try:
        response = requests.post(f"{endpoint}/v1/chat/completions", json=body, timeout=timeout)
        response.raise_for_status()
        content = response.json()["choices"][0]["message"].get("content") or ""
    except (requests.RequestException, ValueError, KeyError, IndexError) as exc:
        raise Unhealthy(f"smoke completion failed: {exc}") from None
    if smoke.expect.lower() not in content.lower():
        raise Unhealthy(f"smoke answer {content.strip()[:120]!r} does not contain {smoke.expect!r}")
    return content


def wait_healthy(target: ProbeTarget, watch: EngineWatch, *, soak: bool = True) -> int:
    """Return the PID that passed; raise Unhealthy saying how it failed, with the engine's own last lines."""
    started = time.monotonic()

    def alive() -> int:
        state, pid, spawn_error = watch.state()
        if state not in ("RUNNING", "STARTING"):
            raise Unhealthy(_died(state, spawn_error, watch.exits(), watch.last_words()), watch.last_lines())
        return pid

    def ready() -> int:
        pid = alive()
        check_models(target.endpoint)
        if watch.state()[0] != "RUNNING":
            raise NotReady("answers, but supervisord has not counted it as started yet")
        return pid

    retrying = Retrying(stop=stop_after_delay(target.deadline_s), wait=wait_fixed(target.interval_s),
                        retry=retry_if_exception_type(NotReady), reraise=True)
    try:
        pid = retrying(ready)
    except NotReady as exc:
        raise Unhealthy(f"not ready within {target.deadline_s:.0f}s ({exc})") from None
    if target.smoke:
        remaining = max(30.0, target.deadline_s - (time.monotonic() - started))
        smoke_test(target.endpoint, target.smoke, timeout=remaining)
    if soak:
        soak_until = time.monotonic() + target.soak_s
        while time.monotonic() < soak_until:
            time.sleep(min(target.interval_s, max(0.0, soak_until - time.monotonic())))
            try:
                now_pid = alive()
                check_models(target.endpoint)
                if now_pid != pid:
                    raise NotReady(f"restarted (pid {pid} → {now_pid})")
            except (NotReady, Unhealthy) as exc:
                ended = watch.exits()
                if ended:  # it died and supervisord may have restarted it: a crash, not a slow load
                    words = watch.last_words()
                    raise Unhealthy(f"crashed during the {target.soak_s:.0f}s soak ({_times(ended)}; was pid {pid})"
                                    + (f": {words}" if words else ""), watch.last_lines()) from None
                raise Unhealthy(f"stopped answering during the {target.soak_s:.0f}s soak: {exc}",
                                getattr(exc, "detail", "")) from None
    return pid


def _died(state: str, spawn_error: str, ended: list[str], words: str) -> str:
    how = _times(ended) if ended else "no exit recorded"
    supervisor = f"supervisord: {state}" + (f", {spawn_error}" if spawn_error else "")
    return f"ds4-server exited ({how}; {supervisor})" + (f": {words}" if words else "")


def _times(ended: list[str]) -> str:
    """'exit status 1', or 'exit status 1, 2 times' when supervisord retried it."""
    last = ended[-1]
    return last if len(ended) == 1 else f"{last}, {len(ended)} times"
