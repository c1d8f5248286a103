"""Warm restart: replay `health.warmup` prompts once a new engine is healthy.

A restart empties the KV cache, so the first request after an upgrade pays a cold prefill (~7.6 s for a
5.5K-token agent prompt at 722 tok/s). Replaying the prompts people start with puts their prefix back before
anyone waits for it. Each prompt is sent twice with a one-token answer: the first time-to-first-token is the
cold cost, the second shows the prefix is now cached.

A prompt file is a text file (used as the system prompt, as an agent sends it) or a `.json` request body
with `messages` (and `tools`, …) sent as given.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ds4_converge.core import bounded_file
from ds4_converge.health.bench import BenchError, request_body, stream
from ds4_converge.spec.model import WARMUP_BYTES_PER_TOKEN

# A prompt longer than the context cannot be replayed: a file beyond ctx x this many bytes is refused before it is
# read (a 3 GiB one was read whole)
BYTES_PER_TOKEN = WARMUP_BYTES_PER_TOKEN


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


def bound(ctx_tokens: int) -> int:
    """The largest warm-up file, in bytes, for an engine of `ctx_tokens` context (server.ctx)."""
    return ctx_tokens * BYTES_PER_TOKEN


def _holds(ctx_tokens: int) -> str:
    return f"a warm-up prompt for server.ctx {ctx_tokens}"


def load(path: Path, ctx_tokens: int) -> dict:
    """The request body to replay (streamed, thinking off, one token)."""
    try:
        text = bounded_file.read(path, bound(ctx_tokens), _holds(ctx_tokens)).decode()
    except bounded_file.FileRefused as exc:
        raise BadPrompt(f"{path}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise BadPrompt(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise BadPrompt(f"{path}: cannot read warm-up prompt: {exc.strerror}") from None
    if path.suffix == ".json":
        try:
            body = bounded_file.load_json(text)
        except ValueError as exc:
            raise BadPrompt(f"{path}: not JSON: {exc}") from None
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
            raise BadPrompt(f"{path}: a .json warm-up prompt is a request body with a non-empty messages list")
        return {**body, **request_body(body["messages"], 1)}
    return request_body([{"role": "system", "content": text}, {"role": "user", "content": "Hello"}], 1)


def problems(paths: dict[str, Path], ctx_tokens: int) -> list[str]:
    """Before anything is stopped: a warm-up file that is not there, is no regular file, or is larger than the
    context allows, by its field (`health.warmup[0]`)."""
    out = []
    for field, path in paths.items():
        try:
            bounded_file.check(path, bound(ctx_tokens), _holds(ctx_tokens))
        except FileNotFoundError:
            out.append(f"{field}: {path}: no such file")
        except bounded_file.FileRefused as exc:
            out.append(f"{field}: {path}: {exc}")
        except OSError as exc:
            out.append(f"{field}: {path}: {exc.strerror or exc}")
    return out


def replay(endpoint: str, paths: list[Path], ctx_tokens: int, timeout: float = 600) -> list[Warmed]:
    done = []
    for path in paths:
        body = load(path, ctx_tokens)
        try:
            cold = stream(endpoint, body, timeout)
            warm = stream(endpoint, body, timeout)
        except BenchError as exc:
            raise BadPrompt(f"warm-up {path}: {exc}") from None
        done.append(Warmed(str(path), cold.prompt_tokens, cold.ttft_s, warm.ttft_s, warm.cached_tokens))
    return done
