"""Commands about what runs under a root: status, logs, stop. Read-only but `stop`; none takes the lock
but `stop` (status and logs are wanted most while a run goes on)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from ds4_converge.cli.command import FAILED, NEVER_CONVERGED, OK, CliError, Command
from ds4_converge.cli.values import number

STATUS_EXITS = """exit codes:
    0  healthy: the engine runs and /v1/models lists the model
    1  not healthy: converged here before, but nothing runs (stopped on purpose: the message says so) or it does
       not answer
    2  invalid spec or usage
    4  never converged under this root"""


def status(args, session) -> int:
    from ds4_converge.cli import fleet_facts, report

    ctx = session.context()
    now = session.snapshot(front=True)  # what serves, read once (service/snapshot.py): every line below reads it
    last_run, part = session.last_run(), ctx.spec.distributed
    standing = now.standing(last_run)
    healthy, error = _health(ctx, now) if standing == "serves" else (False, _not_serving(args, now, standing,
                                                                                        session, last_run))
    code = OK if healthy else NEVER_CONVERGED if standing == "never" else FAILED
    distributed = _distributed_status(ctx, part, running=now.engine.pid is not None) if part else None
    last_good = now.last_good
    document = report.document(
        "status", ok=healthy, exit_code=code, error=error, **session.serving_fields(now), healthy=healthy,
        never_converged=standing == "never", state=now.state_words(), pid=now.engine.pid,
        uptime_s=now.engine.uptime_s, last_good=last_good.release if last_good else None,
        last_good_at=last_good.recorded_at if last_good else None, last_run=last_run,
        last_revert=fleet_facts.last_revert(ctx.layout.logs),
        last_bench=fleet_facts.last_bench(ctx.layout.bench_results), watchdog=fleet_facts.watchdog_summary(ctx.layout.root),
        name=ctx.spec.server.name, root=str(ctx.layout.root), spec=str(args.spec), distributed=distributed,
        front=front_status(ctx, now), stopped=standing == "stopped")
    if ctx.layout.root.is_dir():
        fleet_facts.after_run(ctx.layout.root, document, healthy=healthy)
    if session.json:
        session.emit(document)
    else:
        for line in report.status_lines(document):
            session.out.print(line)
        if distributed and distributed.get("state"):
            session.say(f"worker {part.layers}: {distributed['state']}")
    return code


def _not_serving(args, now, standing: str, session, last_run: dict | None) -> str:
    """Why nothing serves, in words, for each standing of the snapshot but "serves"."""
    root = now.root
    if standing == "unknown":
        return f"cannot tell what runs: {session.unknown_words()}"
    if standing == "never":
        return f"never converged under {root}"
    if standing == "unsupervised":
        return (f"supervisord of {root} is gone, but what it started still runs unsupervised (pid "
                f"{', '.join(map(str, now.leftovers))}): the next run replaces it, `ds4-converge stop` stops it")
    if standing == "stopped":
        from ds4_converge.tool_command import tool_command

        return (f"stopped on purpose by `ds4-converge stop` at {last_run['finished_at']}; "
                f"start it again with: {tool_command()} {args.spec}")
    return "nothing runs" if now.state_words() in ("not running", "STOPPED") else f"the engine is {now.state_words()}"


def _health(ctx, now) -> tuple[bool, str | None]:
    """The engine that serves, as its probe judges it: a worker by its log and data port, else /v1/models (and a
    coordinator's route: it answers /v1/models without its workers)."""
    part = ctx.spec.distributed
    if part is not None and part.worker:
        from ds4_converge.health.worker import judge

        problem = judge(_worker_state(ctx, part))
        return problem is None, problem and f"the worker is not healthy: {problem}"
    from ds4_converge.health.probe import NotReady, Unhealthy, check_models, check_route

    endpoint = now.endpoint()
    try:
        check_models(endpoint, timeout=5)
        if part is not None:
            check_route(endpoint, timeout=30)
    except (NotReady, Unhealthy) as exc:
        return False, f"{endpoint} does not answer right: {exc}"
    return True, None


def front_status(ctx, now) -> dict | None:
    """Where the front door is, where it points, whether it is up (`now`: a snapshot read with the front door);
    None without one."""
    if ctx.spec.front is None:
        return None
    from ds4_converge.service import front

    return front.describe(ctx, now)


LOG_TAIL_BYTES = 256 * 1024  # a worker logs a connection line every ~6 s: the last one is always in here


def _distributed_status(ctx, part, *, running: bool) -> dict:
    """The box's part; for a running worker, whether its log says it is connected to its coordinator now."""
    found = {"role": part.role, "layers": part.layers, "listen": str(part.listen),
             "coordinator": str(part.coordinator) if part.coordinator else None, "connected": None, "line": None,
             "state": None}
    if part.worker and running:
        worker = _worker_state(ctx, part)
        found.update(connected=worker.connected, line=worker.line or None, state=worker.describe())
    return found


def _worker_state(ctx, part):
    """The worker now: the tail of its log and its data port (health.worker.observe)."""
    from ds4_converge.health.worker import observe

    log = ctx.layout.engine_log(ctx.spec.server.name)
    try:
        with open(log, "rb") as handle:
            handle.seek(max(0, log.stat().st_size - LOG_TAIL_BYTES))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        text = ""
    return observe(text, part.listen)


def _logs_arguments(parser) -> None:
    parser.add_argument("-f", "--follow", action="store_true",
                        help="keep printing the engine's log as it grows (Ctrl-C ends); not with --json")
    parser.add_argument("-n", "--lines", type=number(int, 0, 1_000_000), default=50, metavar="N",
                        help="how many of the last lines of each log to show (default 50)")


def logs(args, session) -> int:
    from ds4_converge.cli import report
    from ds4_converge.core.shell import tail

    if args.follow and session.json:
        raise CliError(2, "usage", "logs: --follow and --json do not go together")
    ctx = session.context()
    engine_log = ctx.layout.engine_log(ctx.spec.server.name)
    build_log = failed_build_log(ctx.layout, session.last_run())
    if not engine_log.exists() and build_log is None:
        where = ctx.layout.logs if ctx.layout.root.exists() else ctx.layout.root
        raise CliError(NEVER_CONVERGED, "never_converged",
                       f"no logs yet: nothing under {where}" + ("" if ctx.layout.root.exists()
                                                                 else " (this spec was never converged here)"))
    logs_found = {"build_log": build_log, "engine_log": engine_log if engine_log.exists() else None}
    if session.json:
        session.emit(report.document(
            "logs", ok=True, exit_code=OK, **session.serving_fields(),
            **{key: {"path": str(path), "text": tail(path, args.lines)} if path else None
               for key, path in logs_found.items()}))
        return OK
    if build_log is not None:
        from datetime import datetime

        when = datetime.fromtimestamp(build_log.stat().st_mtime).strftime("%Y-%m-%d %H:%M:%S")
        session.say(f"==> {build_log} (failed build, {when}) <==")
        sys.stdout.write(tail(build_log, args.lines))
    if engine_log.exists():
        session.say(f"==> {engine_log} <==")
        sys.stdout.write(tail(engine_log, args.lines))
    else:
        session.say(f"(no engine log yet: {engine_log})")
    sys.stdout.flush()
    if args.follow and engine_log.exists():
        _follow(engine_log)
    return OK


def failed_build_log(layout, last_run: dict | None) -> Path | None:
    """The newest build log, while it is that of a failed build (no release tree) and no run succeeded since."""
    from datetime import datetime

    builds = sorted(layout.logs.glob("build-*.log"), key=lambda p: p.stat().st_mtime) if layout.logs.is_dir() else []
    if not builds:
        return None
    latest = builds[-1]
    if (layout.releases / latest.stem.removeprefix("build-")).exists():
        return None  # the latest build succeeded
    if last_run and last_run.get("ok") and last_run.get("command") != "stop":  # a stop builds nothing
        try:
            finished = datetime.fromisoformat(last_run["finished_at"]).timestamp()
        except (TypeError, ValueError):
            finished = 0
        if finished >= latest.stat().st_mtime:
            return None  # a later run ended well: that failure is history
    return latest


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


def stop(args, session) -> int:
    from ds4_converge.cli import report
    from ds4_converge.orchestrate.teardown import stop as stop_root

    ctx = session.context(user_may_be_gone=True)  # stopping must work after server.user was deleted
    stopped = False
    if ctx.layout.root.exists():
        with session.lock(stopping=True).acquire():
            stopped = stop_root(ctx)
    message = (f"stopped {ctx.spec.server.name} and its supervisord ({ctx.layout.root})" if stopped
               else f"nothing running under {ctx.layout.root}")
    if ctx.layout.root.is_dir():
        from ds4_converge.cli import fleet_facts
        from ds4_converge.cli.session import write_run_record

        if stopped:  # status then says the box was stopped on purpose, not that it fell over
            write_run_record(ctx.layout.logs, {"command": "stop", "ok": True})
        fleet_facts.after_run(ctx.layout.root, {"command": "stop", "ok": True, "release": None}, healthy=False)
    if session.json:
        session.emit(report.document("stop", ok=True, exit_code=OK, stopped=stopped, message=message))
    else:
        session.say(message)
    return OK


COMMANDS = [
    Command("status", "what serves now: release, PID, uptime, healthy, last good, last run", status,
            epilog=STATUS_EXITS),
    Command("logs", "the engine's log, and the log of the latest build while that build failed", logs,
            add_arguments=_logs_arguments,
            epilog="exit codes:\n    0  shown\n    2  invalid spec or usage\n    4  no logs yet under this root"),
    Command("stop", "stop the engine and the supervisord ds4-converge started (nothing else)", stop,
            epilog="exit codes:\n    0  stopped, or nothing ran\n    1  failed: supervisord did not answer, or a "
                   "permission was refused (what serves is said, or that it cannot be told)\n"
                   "    2  invalid spec or usage\n    3  a converge holds the lock of this root"),
]
