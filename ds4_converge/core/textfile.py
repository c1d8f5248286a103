"""Prometheus's text exposition format (version 0.0.4), as node_exporter's textfile collector reads it.

A family is (name, help, samples), each sample ({label: value}, number); a family without samples is left out.
Every family is a gauge: these files say how things are now, a collector reads them whenever it is scraped.
"""
from __future__ import annotations

Sample = tuple[dict, float | int | None]
Family = tuple[str, str, list[Sample]]


def render(families: list[Family]) -> str:
    lines = []
    for name, help_text, samples in families:
        samples = [(labels, value) for labels, value in samples if value is not None]
        if not samples:
            continue
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for labels, value in samples:
            rendered = ",".join(f'{key}="{_escape(str(val))}"' for key, val in labels.items())
            lines.append(f"{name}{{{rendered}}} {_number(value)}")
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value) -> str:
    return repr(float(value)) if isinstance(value, float) else str(int(value))
