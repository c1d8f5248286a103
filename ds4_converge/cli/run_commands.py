"""Commands that change what serves, or say whether a spec could: converge, validate, schema, rollback."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from ds4_converge.cli.command import FAILED, INVALID, NEVER_CONVERGED, OK, CliError, Command
from ds4_converge.cli.values import number

RUN_EXITS = """exit codes:
    0  converged (with --check: planned)
    1  failed: nothing was switched, or the switch was reverted ("reverted": true); what serves is said
    2  invalid spec or usage
    3  another run holds the lock of this root
  130  interrupted by SIGINT, 143 by SIGTERM (after a switch began, last good is put back first)"""


def _converge_arguments(parser) -> None:
    parser.add_argument("--check", action="store_true",
                        help="plan only: change no file and no process, say what would change")
    parser.add_argument("--facts", type=Path, metavar="FILE",
                        help="with --check: plan against host facts captured on the target (`ds4-converge facts "
                             "SPEC --json > FILE` there) instead of this host's; the report says which were used")
    parser.add_argument("--diff", action="store_true",
                        help="also show unified diffs of rendered files and command lines")
    parser.add_argument("--refresh", action="store_true",
                        help="plan from scratch, host facts included, even when the receipt of the last no-op "
                             "still holds (without it, a converged box is confirmed from that receipt: every "
                             "file, process and the endpoint it relied on are checked, host facts are trusted "
                             "for 15 minutes)")
    parser.add_argument("--progress-interval", type=number(float, 0.5, 3600, also=(0,), what=": never"), default=10.0,
                        metavar="SECONDS",
                        help="without a terminal (journald, Ansible, a pipe): during a long wait, print a "
                             "line with the elapsed time and the log's last line every SECONDS (default 10; "
                             "0: never)")


def converge(args, session) -> int:
    from ds4_converge.cli import noop, report
    from ds4_converge.cli.progress import Reporter, mode_for
    from ds4_converge.core import interrupts
    from ds4_converge.orchestrate import captured_facts
    from ds4_converge.orchestrate.run import run

    facts_at = time.time()
    captured = _captured(args, session)
    ctx = session.context(**({"account": captured_facts.account(captured, session.loaded.spec.server.user)}
                             if captured else {}))
    if not args.check:
        noop.forget(args.spec)
    before = ctx.state.current  # what ran before: the restart's config diff is against it
    reporter = Reporter(mode_for(session.json), interval=args.progress_interval)
    reporter.extra_lines = lambda result: (report.switch_lines(switch_of(before, ctx), check=ctx.check)
                                           if result.name == "service" and result.changed else [])
    reporter.attach(ctx)
    try:
        outcome = run(ctx, session.lock(read_only=args.check), check=args.check, captured=captured, diff=args.diff)
    finally:
        reporter.close()
    signum = interrupts.received()
    code = OK if outcome.ok else (interrupts.exit_code(signum) if signum else FAILED)
    code = finish(session, "converge", outcome, code, check=args.check, switch=switch_of(before, ctx))
    if code == OK and not (args.check or args.diff or outcome.repairs) and noop.is_noop(session.document):
        noop.record(session, ctx, session.document, facts_at=facts_at)
    return code


def _captured(args, session):
    """The target's facts for --check --facts FILE; None without --facts."""
    if args.facts is None:
        return None
    if not args.check:
        raise CliError(INVALID, "usage", "--facts plans against another host's facts: only with --check (a run "
                                         "that changes this host reads this host)")
    from ds4_converge.orchestrate.captured_facts import NotFacts, load

    session.load_spec()
    try:
        return load(args.facts)
    except NotFacts as exc:
        raise CliError(INVALID, "usage", str(exc)) from None


def switch_of(before, ctx) -> dict | None:
    """What the engine restart of this run changes (or would): {"from", "to", "changes"}; None: no restart."""
    from ds4_converge.core.config_diff import config_changes

    if not ctx.restart_needed:
        return None
    was = before.release if before else None
    if ctx.desired is None:  # check mode before the build: the command line comes from the built binary
        to = ctx.build.release_id if ctx.build else None
        changes = ([f"first start: release {to}"] if was is None else [f"release {was} → {to}"] if was != to
                   else []) + ["(command line known after the build)"]
        return {"from": was, "to": to, "changes": changes}
    return {"from": was, "to": ctx.desired.release, "changes": config_changes(before, ctx.desired)}


def finish(session, command: str, outcome, code: int, *, check: bool, switch: dict | None) -> int:
    """The report of a converge or rollback: recorded under root, then the JSON document or the recap."""
    from ds4_converge.cli import report
    from ds4_converge.cli.service_commands import front_status
    from ds4_converge.core import interrupts

    fronted = bool(session.ctx and session.ctx.spec.front and not check)
    now = session.snapshot(front=fronted)  # what serves after the run, read once (service/snapshot.py)
    document = report.document(
        command, ok=outcome.ok, exit_code=code, error=outcome.error, **session.serving_fields(now),
        aborted="interrupted" if interrupts.received() and not outcome.ok else None,
        changed=outcome.changed, reverted=outcome.reverted, check=check, detail=outcome.detail or None,
        roles=[r.to_json() for r in outcome.results], switch=switch,
        **({"front": front_status(session.ctx, now)} if fronted else {}))
    session.document = document
    if not check:
        session.record_run(document)
    if session.json:
        session.emit(document)
    else:
        report.print_lines(report.recap(document))
        if document["aborted"] == "interrupted":
            from signal import Signals

            serving = report.serving_words(document)
            sys.stderr.write(f"ds4-converge: interrupted by {Signals(interrupts.received()).name}; "
                             f"serving: {serving}\n")
    return code


def validate(args, session) -> int:
    from ds4_converge.cli import report

    from ds4_converge.models.placement import missing_here

    # valid is about the spec itself (its model may be on another host): a file a run here would miss is a note
    notes = missing_here(session.load_spec())
    if session.json:
        session.emit(report.document("validate", ok=True, exit_code=OK, spec=str(args.spec), notes=notes))
    else:
        session.say(f"{args.spec}: valid")
        for note in notes:
            session.say(f"  note: a run on this host would fail: {note}")
    return OK


def schema(args, session) -> int:
    from ds4_converge.spec.loader import schema_json

    sys.stdout.write(schema_json())
    return OK


ROLLBACK_EXITS = """exit codes:
    0  the target is back and passed the probe
    1  failed (no earlier good release, or the target is not healthy)
    2  invalid spec or usage
    3  another run holds the lock of this root
    4  never converged under this root: nothing to roll back to
  130  interrupted by SIGINT, 143 by SIGTERM"""


def rollback(args, session) -> int:
    from ds4_converge.cli import report
    from ds4_converge.cli.progress import Reporter, mode_for
    from ds4_converge.core import interrupts
    from ds4_converge.orchestrate.rollback import rollback as run

    ctx = session.context()
    if not ctx.layout.root.exists() or (ctx.state.current is None and not ctx.state.good):
        raise CliError(NEVER_CONVERGED, "never_converged",
                       f"nothing to roll back: this spec was never converged under {ctx.layout.root}")
    before = ctx.state.current
    reporter = Reporter(mode_for(session.json))
    reporter.attach(ctx)
    reporter.extra_lines = lambda result: report.switch_lines(switch_of(before, ctx), check=False)
    try:
        with session.lock().acquire():
            reporter.role_started("rollback")
            outcome = run(ctx)
            ctx.restart_needed = ctx.desired is not None
            for result in outcome.results:
                reporter.role_done(result)
    finally:
        reporter.close()
    signum = interrupts.received()
    code = OK if outcome.ok else (interrupts.exit_code(signum) if signum else FAILED)
    return finish(session, "rollback", outcome, code, check=False, switch=switch_of(before, ctx))


COMMANDS = [
    Command("converge", "converge this box to SPEC (what `ds4-converge SPEC` runs)", converge,
            add_arguments=_converge_arguments, epilog=RUN_EXITS,
            description="Validate SPEC, then plan and apply each role in order (preflight, toolchain, models, "
                        "engine, service, probe); a switched engine that is not healthy is reverted to last "
                        "good. Each role's line prints as it finishes; long waits show their progress."),
    Command("validate", "validate SPEC only (with --set), touching nothing", validate,
            epilog="exit codes:\n    0  valid\n    2  invalid: each problem as FILE:LINE:COL: field.path: message"),
    Command("schema", "print the JSON Schema of the spec", schema, takes_spec=False, json=False,
            epilog="exit codes:\n    0  printed\n    2  usage"),
    Command("rollback", "back to last good, or from last good to the good release before it, through the probe",
            rollback, epilog=ROLLBACK_EXITS),
]
