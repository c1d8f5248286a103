"""ds4-converge command line: a thin shell over the library.

Exit codes: 0 converged, 1 failed (a revert included), 2 invalid spec or usage, 3 another run holds the lock.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ds4_converge.cli import report
from ds4_converge.cli.exit_codes import FAILED, INVALID, LOCKED, OK
from ds4_converge.core.context import Context, make_context
from ds4_converge.core.lock import LockHeld, RunLock
from ds4_converge.spec.loader import SpecInvalid, load_spec, schema_json

COMMANDS = ("validate", "schema", "status", "stop", "logs", "rollback", "facts", "init")


def _spec_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", type=Path, help="the spec YAML file")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="dotted.key=value",
                        help="override a spec value (repeatable), e.g. --set server.ctx=65536")


def build_parser(command: str) -> argparse.ArgumentParser:
    if command == "converge":
        parser = argparse.ArgumentParser(prog="ds4-converge",
                                         description="Converge this box to SPEC, or leave it serving what it served. "
                                                     f"Other commands: {', '.join(COMMANDS)}.")
        _spec_args(parser)
        parser.add_argument("--check", action="store_true", help="plan only: change nothing, say what would change")
        parser.add_argument("--diff", action="store_true", help="show unified diffs of files and command lines")
        parser.add_argument("--json", action="store_true", help="print one JSON document")
        return parser
    parser = argparse.ArgumentParser(prog=f"ds4-converge {command}")
    if command == "schema":
        return parser
    if command in ("facts", "init"):
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--port", type=int, default=8000)
        if command == "init":
            parser.add_argument("--out", type=Path, default=Path("spec.yaml"))
        return parser
    _spec_args(parser)
    if command == "status":
        parser.add_argument("--json", action="store_true")
    if command == "logs":
        parser.add_argument("-f", "--follow", action="store_true")
        parser.add_argument("-n", "--lines", type=int, default=50)
    if command == "rollback":
        parser.add_argument("--json", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv.pop(0) if argv and argv[0] in COMMANDS else "converge"
    try:
        args = build_parser(command).parse_args(argv)
    except SystemExit as exc:
        return INVALID if exc.code else OK
    out = report.console()
    err = report.console(sys.stderr)
    if command == "schema":
        sys.stdout.write(schema_json())
        return OK
    if command in ("facts", "init"):
        from ds4_converge.cli import host_commands

        return getattr(host_commands, command)(args, out)
    try:
        loaded = load_spec(args.spec, args.overrides)
    except SpecInvalid as exc:
        for problem in exc.problems:
            err.print(problem, markup=False, highlight=False)
        return INVALID
    if command == "validate":
        out.print(f"{args.spec}: valid", markup=False)
        return OK
    json_mode = getattr(args, "json", False)
    try:
        ctx = make_context(loaded, say=(lambda *_: None) if json_mode else (lambda m: err.print(f"… {m}", markup=False)),
                           progress=not json_mode and sys.stderr.isatty())
    except SpecInvalid as exc:  # the spec does not fit this host (an unknown server.user, paths.root)
        for problem in exc.problems:
            err.print(problem, markup=False, highlight=False)
        return INVALID
    if command in ("status", "logs"):
        return globals()[f"_{command}"](ctx, args, out)  # read-only, and wanted most while a run goes on
    if command in ("stop", "rollback") and not ctx.layout.root.exists():
        err.print(f"{ctx.layout.root} does not exist: this spec was never converged here", markup=False)
        return OK if command == "stop" else FAILED
    read_only = getattr(args, "check", False)
    lock = RunLock(ctx.layout.lock_file, read_only=read_only)
    try:
        if command == "converge" and not read_only and not ctx.layout.root.exists():
            # a box never converged: take the lock (creating ROOT) only right before the first change,
            # so a run refused by preflight leaves no trace
            ctx.before_change = lock.acquire
            with lock:
                return _converge(ctx, args, out)
        with lock.acquire():
            if command == "converge":
                return _converge(ctx, args, out)
            return globals()[f"_{command}"](ctx, args, out)
    except LockHeld as exc:
        err.print(str(exc), markup=False)
        return LOCKED


def _converge(ctx: Context, args, out) -> int:
    from ds4_converge.core.reconciler import converge

    ctx.check = args.check
    outcome = converge(ctx, diff=args.diff or False)
    if args.json:
        report.print_json(outcome.to_json())
    else:
        report.print_outcome(outcome, out, check=args.check)
    return OK if outcome.ok else FAILED


def _status_document(ctx: Context) -> dict:
    from ds4_converge.health.probe import NotReady, Unhealthy, check_models

    name, supervisor = ctx.spec.server.name, ctx.supervisor
    info = supervisor.info(name) if supervisor.is_running() else None
    pid = info["pid"] if info and info["statename"] in ("RUNNING", "STARTING") and info["pid"] else None
    healthy = False
    if pid:
        try:
            check_models(ctx.endpoint, timeout=5)
            healthy = True
        except (NotReady, Unhealthy):
            pass
    current, last_good = ctx.state.current, ctx.state.last_good
    return {"release": current.release if current else None, "pid": pid,
            "state": info["statename"] if info else "not running",
            "uptime_s": int(info["now"] - info["start"]) if pid else None, "healthy": healthy,
            "endpoint": ctx.endpoint, "last_good": last_good.release if last_good else None,
            "last_good_at": last_good.recorded_at if last_good else None}


def _status(ctx: Context, args, out) -> int:
    document = _status_document(ctx)
    if args.json:
        report.print_json(document)
    else:
        report.status_table(document, out)
    return OK if document["healthy"] else FAILED


def _stop(ctx: Context, args, out) -> int:
    """Maintenance or teardown: stop the engine, then the supervisord this tool started."""
    from ds4_converge.service.systemd import has_systemd, unit_path

    supervisor, name = ctx.supervisor, ctx.spec.server.name
    if supervisor.is_running():
        supervisor.stop(name, grace=ctx.spec.server.stop_wait_s)
        unit = unit_path(name)
        if has_systemd() and unit.exists():
            import subprocess

            subprocess.run(["systemctl", "disable", "--now", unit.name], check=False)
        supervisor.shutdown()
        out.print(f"stopped {name} and its supervisord ({ctx.layout.root})", markup=False)
    else:
        out.print(f"nothing running under {ctx.layout.root}", markup=False)
    return OK


def _logs(ctx: Context, args, out) -> int:
    from ds4_converge.core.shell import tail

    log = ctx.layout.engine_log(ctx.spec.server.name)
    failed_builds = sorted((p for p in ctx.layout.logs.glob("build-*.log")
                            if not (ctx.layout.releases / p.stem.removeprefix("build-")).exists()),
                           key=lambda p: p.stat().st_mtime)
    if failed_builds:
        out.print(f"==> {failed_builds[-1]} (failed build) <==", markup=False)
        sys.stdout.write(tail(failed_builds[-1], args.lines))
    out.print(f"==> {log} <==", markup=False)
    sys.stdout.write(tail(log, args.lines))
    sys.stdout.flush()
    if args.follow:
        _follow(log)
    return OK


def _follow(path: Path) -> None:
    with open(path, errors="replace") as handle:
        handle.seek(0, 2)
        try:
            while True:
                line = handle.readline()
                if line:
                    sys.stdout.write(line)
                    sys.stdout.flush()
                else:
                    time.sleep(0.5)
        except KeyboardInterrupt:
            pass


def _rollback(ctx: Context, args, out) -> int:
    from ds4_converge.core.rollback import rollback

    outcome = rollback(ctx)
    if args.json:
        report.print_json(outcome.to_json())
    else:
        report.print_outcome(outcome, out, check=False)
    return OK if outcome.ok else FAILED

