"""`ds4-converge SPEC` on a box that is already converged, answered from the last no-op's receipt.

`replay` runs before anything heavy is imported (no pydantic, no spec validation, no host commands): when the
receipt of the last full no-op still holds (orchestrate/receipt.py checks every file, process and the endpoint it relied
on), the run reports that no-op again, with today's time, and records it as the last run. `--json --check` (the
fleet role's plan before each host's turn) is answered the same way: a converge would change nothing, so the plan
is that no-op, marked `check` and recorded as no run. Whenever anything differs, or the arguments ask for more
(--diff, --refresh, --check without --json, ...), it returns None and the full converge or plan runs as always.
`record` writes the receipt after a full converge that changed nothing.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from ds4_converge.orchestrate import receipt

# the arguments a receipt can answer; anything else is a full converge
JSON, SET, CHECK = "--json", "--set", "--check"


def fast_arguments(argv: list[str], commands) -> tuple[Path, list[str], bool, bool] | None:
    """(spec, --set values, --json, --check) when argv is a plain `ds4-converge SPEC [--json] [--set K=V ...]`, or
    the same with `--check` and `--json` (a plan read by a program: text mode prints a converge's lines)."""
    if not argv or argv[0].startswith("-") or argv[0] in commands:
        return None
    spec, overrides, json_mode, check, rest = Path(argv[0]), [], False, False, argv[1:]
    while rest:
        word = rest.pop(0)
        if word == JSON:
            json_mode = True
        elif word == CHECK:
            check = True
        elif word == SET and rest:
            overrides.append(rest.pop(0))
        elif word.startswith(SET + "="):
            overrides.append(word[len(SET) + 1:])
        else:
            return None
    if check and not json_mode:
        return None
    return spec, overrides, json_mode, check


def replay(argv: list[str], commands) -> int | None:
    """The recorded no-op's exit code after printing it again; None: take the full path."""
    parsed = fast_arguments(argv, commands)
    path = receipt.receipt_path(parsed[0]) if parsed else None
    stored = receipt.load(path) if path else None
    if stored is None:
        return None
    spec, overrides, json_mode, check = parsed
    try:
        asked = receipt.inputs(spec, overrides)
    except OSError:  # the spec is gone or unreadable: the full path says so properly
        return None
    from ds4_converge.core.lock import LockHeld, RunLock

    try:
        lock = RunLock(Path(stored["lock"]), read_only=True).acquire()  # a run in progress: the full path waits
    except (LockHeld, OSError):
        return None
    with lock:
        if receipt.still_holds(stored, asked) is not None:
            return None
        document = {**stored["document"], "from_receipt": stored["recorded_at"]}
        if check:  # the plan of a converge that would change nothing: that no-op, planned, not run
            document["check"] = True
        else:
            from ds4_converge.cli.session import write_last_run

            write_last_run(Path(stored["logs"]), document)
    if json_mode:
        from ds4_converge.cli.report import print_json

        print_json(document)
    else:
        _print_lines(stored["lines"], stored["recorded_at"])
    return document["exit_code"]


def _print_lines(lines: list[dict], recorded_at: str) -> None:
    """As the full run printed them: in colour on a terminal, plain and time-stamped anywhere else."""
    from ds4_converge.cli.progress import mode_for, plain_line, stamp
    from ds4_converge.cli.report import print_lines

    note = [("dim", f"(no-op checked against the receipt of the full run at {recorded_at}; --refresh plans "
                    "from scratch)")]
    if mode_for(False) == "live":
        print_lines([line["segments"] for line in lines] + [note])
        return
    now = stamp()
    text = [plain_line(line["segments"], stamped=line["stamped"], now=now) if line["role"]
            else "".join(part for _, part in line["segments"]) for line in lines]
    sys.stdout.write("\n".join([*text, note[0][1]]) + "\n")
    sys.stdout.flush()


def forget(spec: Path) -> None:
    """A full converge starts: whatever it does, the last receipt no longer speaks for this box."""
    receipt.forget(receipt.receipt_path(spec))


def is_noop(document: dict) -> bool:
    """Nothing applied by any role (not even a wait for an engine supervisord restarted): a report worth
    repeating as long as nothing changes."""
    return not document["changed"] and all(not role["changes"] for role in document["roles"])


def record(session, ctx, document: dict, *, facts_at: float) -> None:
    """After a full converge that changed nothing: what it relied on, and what it printed. Best effort: a
    receipt that cannot be made only costs the next run its shortcut, never this run its result."""
    try:
        _record(session, ctx, document, facts_at)
    except Exception:  # noqa: BLE001 - the spec removed meanwhile, supervisord gone, an unwritable cache …
        forget(Path(session.args.spec))


def _record(session, ctx, document: dict, facts_at: float) -> None:
    path = receipt.receipt_path(Path(session.args.spec))
    current = ctx.state.current
    if path is None or current is None or ctx.state.damaged:
        return
    from ds4_converge.health.probe import MODEL_ID
    from ds4_converge.service.guard import intent_path
    from ds4_converge.service.systemd import unit_path
    from ds4_converge.service.watch import endpoint

    now = session.snapshot()  # what serves (service/snapshot.py): the receipt records the processes it names
    layout, name = ctx.layout, ctx.spec.server.name
    try:
        supervisord = int(layout.supervisord_pid.read_text().strip())
    except (OSError, ValueError):
        return
    if now is None or not now.engine.pid:
        return
    release = layout.releases / current.release
    files = [layout.state_file, layout.supervisord_conf, layout.program_conf(name), intent_path(layout),
             unit_path(name), *(layout.cache / f for f in ("pins.json", "digests.json", "rendered.json")),
             release, *current.model_files, "/etc/passwd", "/etc/group", current.command[0],  # env
             *(arg for arg in current.command if arg.startswith(f"{release}/"))]  # ds4-server
    if ctx.spec.engine.installer:
        files.append(ctx.host_path(ctx.spec.engine.installer))
    running = {"supervisord": supervisord, name: now.engine.pid}
    if ctx.spec.front is not None:  # the front door's config, the files it reads, and HAProxy itself
        from ds4_converge.service import front

        if now.front.state != "RUNNING":
            return
        running[front.PROGRAM] = now.front.pid
        tls = ctx.spec.front.tls
        files += [front.config_path(layout), ctx.host_path(ctx.spec.front.keys),
                  *([ctx.host_path(tls.cert), ctx.host_path(tls.key)] if tls else [])]
    if ctx.toolkit.nvcc:
        files.append(ctx.toolkit.nvcc)
    asked = receipt.inputs(Path(session.args.spec), list(session.args.overrides))
    made = receipt.make(asked, root=layout.root, files=[str(f) for f in files],
                        processes=running, endpoint=endpoint(ctx),
                        model_id=MODEL_ID, document=document, facts_at=facts_at)
    made.update(lock=str(layout.lock_file), logs=str(layout.logs), recorded_at=time.strftime("%Y-%m-%d %H:%M:%S"),
                lines=_lines(document))
    receipt.save(path, made)


def _lines(document: dict) -> list[dict]:
    """The role lines and the recap of `document`, as the (style, text) segments report.py prints."""
    from types import SimpleNamespace

    from ds4_converge.cli import report

    lines = [{"segments": line, "stamped": i == 0, "role": True} for role in document["roles"]
             for i, line in enumerate(report.role_lines(SimpleNamespace(**role), check=False))]
    return lines + [{"segments": line, "stamped": False, "role": False} for line in report.recap(document)]
