"""What people and programs read: one line per role and a recap (colour on a TTY), or one JSON document."""
from __future__ import annotations

import json
import sys

STYLE = {"ok": "green", "changed": "yellow", "failed": "bold red", "skipped": "cyan"}


class _LazyConsole:
    """A rich Console made on first use: a run that prints only JSON never imports rich."""

    def __init__(self, stream) -> None:
        self._stream, self._console = stream, None

    def __getattr__(self, name):
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self._stream or sys.stdout, highlight=False, soft_wrap=True)
        return getattr(self._console, name)


def console(stream=None):
    return _LazyConsole(stream)


def print_outcome(outcome, out, *, check: bool) -> None:
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


def status_table(status: dict, out) -> None:
    from rich.table import Table

    table = Table(show_header=False, box=None)
    for key, value in status.items():
        table.add_row(key, _escape(str(value)))
    out.print(table)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
