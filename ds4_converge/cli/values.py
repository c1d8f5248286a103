"""Command-line values checked like spec values: finite, in range, or a usage error (exit 2) naming the option."""
from __future__ import annotations

import argparse
import math


def number(kind: type, low: float, high: float, *, also: tuple = (), what: str = ""):
    """An argparse `type`: a `kind` (int or float) in [low, high], or one of `also` (e.g. 0 for "never")."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if value in also:
            return value
        if isinstance(value, float) and not math.isfinite(value) or not low <= value <= high:
            extra = f" (or {', '.join(map(str, also))}{what})" if also else ""
            raise argparse.ArgumentTypeError(f"{text!r} is out of range: from {kind(low)} to {kind(high)}{extra}")
        return value

    parse.__name__ = kind.__name__
    return parse


def number_list(kind: type, low: float, high: float, *, words: tuple[str, ...] = ()):
    """Comma-separated numbers, each checked as `number` does; `words` (e.g. 'ctx') pass as they are."""
    one = number(kind, low, high)

    def parse(text: str) -> tuple:
        parts = text.split(",")
        if not 1 <= len(parts) <= 64:
            raise argparse.ArgumentTypeError(f"{text[:40]!r}: from 1 to 64 comma-separated values")
        return tuple(p if p in words else one(p) for p in parts)

    parse.__name__ = "list"
    return parse
