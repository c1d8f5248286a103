"""What people and programs read: one line per role and a recap (colour on a TTY), or one JSON document."""
from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.table import Table

STYLE = {"ok": "green", "changed": "yellow", "failed": "bold red", "skipped": "cyan"}


def console(stream=None) -> Console:
    return Console(file=stream or sys.stdout, highlight=False, soft_wrap=True)


def print_outcome(outcome, out: Console, *, check: bool) -> None:
    for result in outcome.results:
        label = result.status
        out.print(f"[{STYLE[label]}]{label:<8}[/] {result.name:<10} {_escape(result.msg)}")
        for warning in result.warnings:
            out.print(f"[yellow]  warning:[/] {_escape(warning)}")
        for note in result.notes:
            out.print(f"  note: {_escape(note)}", style="dim")
        for change in result.changes if check or result.changed else []:
            out.print(f"  - {_escape(change)}")
        if result.diff:
            out.print(_escape(result.diff.rstrip("\n")), style="dim")
    counts = {s: sum(r.status == s for r in outcome.results) for s in STYLE}
    recap = "  ".join(f"[{STYLE[s]}]{s}={n}[/]" for s, n in counts.items())
    mode = " (check mode: nothing was changed)" if check else ""
    out.print(f"\nRECAP {recap}{mode}")
    if outcome.ok:
        if outcome.endpoint and not check:
            out.print(f"[green]converged[/]: release {outcome.release} serving {outcome.endpoint}")
    else:
        out.print(f"[bold red]FAILED[/]: {_escape(outcome.error)}")
        if outcome.detail:
            out.print(_escape(outcome.detail.rstrip()), style="dim")


def print_json(document: dict, stream=None) -> None:
    (stream or sys.stdout).write(json.dumps(document, indent=2, sort_keys=False) + "\n")


def status_table(status: dict, out: Console) -> None:
    table = Table(show_header=False, box=None)
    for key, value in status.items():
        table.add_row(key, _escape(str(value)))
    out.print(table)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
