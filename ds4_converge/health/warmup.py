"""Warm restart: replay `health.warmup` prompts once a new engine is healthy.

A restart empties the KV cache, so the first request after an upgrade pays a cold prefill (~7.6 s for a
5.5K-token agent prompt at 722 tok/s). Replaying the prompts people start with puts their prefix back before
anyone waits for it. Each prompt is sent twice with a one-token answer: the first time-to-first-token is the
cold cost, the second shows the prefix is now cached.

A prompt file is a text file (used as the system prompt, as an agent sends it) or a `.json` request body
with `messages` (and `tools`, …) sent as given.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ds4_converge.health.bench import BenchError, request_body, stream


class BadPrompt(Exception):
    pass


@dataclass(frozen=True)
class Warmed:
    path: str
    prompt_tokens: int
    ttft_cold_s: float
    ttft_warm_s: float
    cached_tokens: int  # of the warm request

    def describe(self) -> str:
        return (f"warm-up {Path(self.path).name} ({self.prompt_tokens} tokens): TTFT {self.ttft_cold_s:.2f} s cold, "
                f"{self.ttft_warm_s:.2f} s warm")


def load(path: Path) -> dict:
    """The request body to replay (streamed, thinking off, one token)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise BadPrompt(f"{path}: cannot read warm-up prompt: {exc.strerror}") from None
    if path.suffix == ".json":
        try:
            body = json.loads(text)
        except ValueError as exc:
            raise BadPrompt(f"{path}: not JSON: {exc}") from None
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
            raise BadPrompt(f"{path}: a .json warm-up prompt is a request body with a non-empty messages list")
        return {**body, **request_body(body["messages"], 1)}
    return request_body([{"role": "system", "content": text}, {"role": "user", "content": "Hello"}], 1)


def missing(paths: list[Path]) -> list[str]:
    """Problems to report before anything is stopped: a warm-up file that is not there."""
    return [f"health.warmup: {p}: no such file" for p in paths if not p.is_file()]


def replay(endpoint: str, paths: list[Path], timeout: float = 600) -> list[Warmed]:
    done = []
    for path in paths:
        body = load(path)
        try:
            cold = stream(endpoint, body, timeout)
            warm = stream(endpoint, body, timeout)
        except BenchError as exc:
            raise BadPrompt(f"warm-up {path}: {exc}") from None
        done.append(Warmed(str(path), cold.prompt_tokens, cold.ttft_s, warm.ttft_s, warm.cached_tokens))
    return done
