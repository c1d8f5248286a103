"""What people and programs read: role lines and a recap (colour on a terminal), tables, or one JSON document.

Every ``--json`` document is built by :func:`document` and follows ``report.schema.json`` (shipped with the
package; tests validate every command's output against it). Fields every document has:

- ``command``, ``ok``, ``exit_code``;
- ``aborted``: null when the command ran to its own result, otherwise why it stopped early (``usage``,
  ``invalid``, ``locked``, ``never_converged``, ``interrupted``, ``internal``);
- ``error``: null, or one line for people;
- ``release`` / ``endpoint``: what serves now under this spec's root — the release whose engine runs and its
  URL — null when nothing does (or the spec could not be read, so the root is unknown).

rich is imported only when something is printed for people on a terminal: a --json run, or one whose output goes
to a log or a pipe, never pays for it.
"""
from __future__ import annotations

import json
import sys

STYLE = {"ok": "green", "changed": "yellow", "failed": "bold red", "skipped": "cyan"}
SCHEMA_FILE = "report.schema.json"


# ------------------------------------------------------------------------------------------------ documents


def document(command: str, *, ok: bool, exit_code: int, error: str | None = None, release: str | None = None,
             endpoint: str | None = None, aborted: str | None = None, **fields) -> dict:
    return {"command": command, "ok": ok, "exit_code": exit_code, "aborted": aborted, "error": error or None,
            "release": release, "endpoint": endpoint, **fields}


def print_json(document: dict, stream=None) -> None:
    stream = stream or sys.stdout
    stream.write(json.dumps(document, indent=2, default=str) + "\n")
    stream.flush()


def schema() -> dict:
    """The JSON Schema of every --json document."""
    from importlib import resources

    return json.loads(resources.files("ds4_converge.cli").joinpath(SCHEMA_FILE).read_text())


# ------------------------------------------------------------------------------------------------- for people


# A line for people is a list of (style, text) segments: rich renders it on a terminal (styles are rich's), and
# without one the texts are simply joined, so a run that prints to a log, a pipe or Ansible never imports rich.
Line = list[tuple[str, str]]


def console(stream=None):
    from rich.console import Console

    return Console(file=stream or sys.stdout, highlight=False, soft_wrap=True)


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(str(text))


def plain(markup: str) -> str:
    """A rich markup line as plain text (for logs: journald, Ansible)."""
    from rich.text import Text

    return Text.from_markup(markup).plain


def text_of(line: Line) -> str:
    return "".join(text for _, text in line)


def markup_of(line: Line) -> str:
    return "".join(f"[{style}]{escape(text)}[/]" if style else escape(text) for style, text in line)


def print_lines(lines: list[Line], stream=None) -> None:
    """In colour through rich on a terminal; plain text anywhere else."""
    stream = stream or sys.stdout
    if stream.isatty():
        out = console(stream)
        for line in lines:
            out.print(markup_of(line))
        return
    stream.write("".join(text_of(line) + "\n" for line in lines))
    stream.flush()


def role_lines(result, *, check: bool) -> list[Line]:
    """One role's line, then its warnings, notes, changes and diff."""
    label = result.status
    lines = [[(STYLE[label], f"{label:<8}"), ("", f" {result.name:<10} {result.msg}")]]
    lines += [[("yellow", "  warning:"), ("", f" {w}")] for w in result.warnings]
    lines += [[("dim", f"  note: {n}")] for n in result.notes]
    lines += [[("", f"  - {c}")] for c in (result.changes if check or result.changed else [])]
    if result.diff:
        lines += [[("dim", line)] for line in result.diff.rstrip("\n").splitlines()]
    return lines


def switch_lines(switch: dict | None, *, check: bool) -> list[Line]:
    """What a restart changes, in words (`ctx 65536 → 32768`), under the line of the role that restarts."""
    if not switch:
        return []
    verb = "would change" if check else "changes"
    changes = switch["changes"] or ["(same settings)"]
    return [[("bold", f"  {verb}:"), ("", f" {changes[0]}")]] + [[("", f"           {c}")] for c in changes[1:]]


def recap(document: dict) -> list[Line]:
    """The end of a converge or rollback: counts, then what serves now or why it failed."""
    roles = document.get("roles") or []
    counts = {s: sum(r["status"] == s for r in roles) for s in STYLE}
    check = document.get("check")
    lines: list[Line] = []
    if roles:
        counted = [part for s, n in counts.items() for part in (("", "  "), (STYLE[s], f"{s}={n}"))][1:]
        lines += [[], [("", "RECAP ")] + counted + ([("", " (check mode: nothing was changed)")] if check else [])]
    if document["ok"]:
        if document["release"] and not check:
            verb = "converged" if document["command"] == "converge" else "rolled back"
            front = document.get("front")
            if front:
                lines.append([("green", verb), ("", f": release {document['release']} serving {front['url']} "
                                                    f"(front door → engine {document['endpoint']})")])
                lines.append([("", f"try:  {curl_line(front['url'], key=True)}")])
            else:
                lines.append([("green", verb),
                              ("", f": release {document['release']} serving {document['endpoint']}")])
                lines.append([("", f"try:  {curl_line(document['endpoint'])}")])
        return lines
    lines.append([("bold red", "FAILED"), ("", f": {document['error'] or 'failed'}")])
    if document.get("detail"):
        lines.append([("dim", document["detail"].rstrip())])
    lines.append([("", f"serving: {serving_words(document)}")])
    return lines


def serving_words(document: dict) -> str:
    """What serves, as a document says it: "release R on URL", "nothing", or "cannot tell (why)"."""
    if document.get("serving_unknown"):
        return f"cannot tell ({document['serving_unknown']})"
    return f"release {document['release']} on {document['endpoint']}" if document["release"] else "nothing"


def curl_line(endpoint: str, *, key: bool = False) -> str:
    """key: through a front door, with a key of front.keys in $KEY (never printed)."""
    from ds4_converge.health.probe import MODEL_ID  # the id /v1/models lists

    body = json.dumps({"model": MODEL_ID, "messages": [{"role": "user", "content": "What is the capital of France?"}]},
                      separators=(",", ":"))
    auth = " -H \"Authorization: Bearer $KEY\"" if key else ""
    return f"curl -s {endpoint}/v1/chat/completions{auth} -H 'Content-Type: application/json' -d '{body}'"


def status_lines(doc: dict) -> list[str]:
    """`status` for people: a headline, then aligned rows; no Python None/True anywhere."""
    name = doc["name"]
    last_run = doc.get("last_run")
    if doc["never_converged"]:
        lines = [f"{name}: [bold]never converged[/] under {escape(doc['root'])}"]
        if last_run:
            lines.append(f"  last run: {escape(last_run['command'])} at {last_run['finished_at']}: "
                         f"{escape(one_line(last_run['error'] or 'failed'))}")
        from ds4_converge.tool_command import tool_command

        return lines + [f"  converge it with: {escape(tool_command())} {escape(doc['spec'])}"]
    front = doc.get("front")
    if doc["healthy"]:
        # clients come through the front door (with a key); the engine's own slot is a row below
        where = front["url"] if front and front["up"] else doc["endpoint"]
        head = f"{name}: [green]healthy[/], serving release {escape(doc['release'])} on {where}"
    elif doc.get("stopped"):
        head = f"{name}: [bold]stopped[/]{escape(doc['error'].removeprefix('stopped'))}"
    elif doc["state"] == "unknown":
        head = f"{name}: [bold red]cannot tell what serves[/]: {escape(doc['error'].removeprefix('cannot tell what runs: '))}"
    elif doc["release"]:
        head = f"{name}: [bold red]not healthy[/]: release {escape(doc['release'])} runs but {escape(doc['error'])}"
    else:
        head = f"{name}: [bold red]not serving[/] ({escape(doc['error'])})"
    rows = [("process", doc["state"] + (f", pid {doc['pid']}, up {duration(doc['uptime_s'])}" if doc["pid"] else ""))]
    rows.append(("last good", f"{doc['last_good']}, recorded {doc['last_good_at']}" if doc["last_good"] else "none yet"))
    if last_run:
        outcome = "ok" if last_run["ok"] else f"failed: {one_line(last_run['error'] or '')}"
        rows.append(("last run", f"{last_run['command']} at {last_run['finished_at']}: {outcome}"))
    watch = doc.get("watchdog") or {}
    if watch.get("last_incident"):
        from ds4_converge.service.watchdog import incident_words
    if watch.get("last_restart"):
        last = watch["last_restart"]
        rows.append(("watchdog", f"{watch['incidents']} incident(s); last restart {last['at']}: "
                                 f"{incident_words(last)}"))
    incident = watch.get("last_incident")
    if incident and incident.get("action") != "restarted":  # not restarted, restart failed: what it says now
        rows.append(("watchdog", f"last incident {incident['at']}: {incident_words(incident)}: "
                                 f"{incident['action']}"))
    if front:
        where = (f"→ engine {front['points_at']}" if front["points_at"] else "→ no engine slot in service") \
            if front["up"] else f"down ({front.get('problem') or 'HAProxy does not run'})"
        if front.get("unsupervised_pid"):
            where += f", unsupervised (HAProxy pid {front['unsupervised_pid']}: the next run replaces it)"
        rows.append(("front door", f"{front['url']} {where}"
                                   + (f"; metrics {front['metrics']}" if front["metrics"] else "")))
    rows.append(("root", doc["root"]))
    width = max(len(k) for k, _ in rows)
    return [head] + [f"  {k:<{width}}  {escape(v)}" for k, v in rows]


def one_line(text: str) -> str:
    """A many-line error (with an engine's log tail inside) as its first and last lines."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if len(lines) <= 1:
        return lines[0] if lines else ""
    return f"{lines[0]} … {lines[-1]}"


def duration(seconds: float | None) -> str:
    """12s, 4m05s, 2h10m."""
    seconds = int(seconds or 0)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
