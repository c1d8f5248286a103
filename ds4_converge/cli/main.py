"""ds4-converge: the command line, and the safety net around every command.

`ds4-converge SPEC ...` is the main command: a first argument that is not a command name is a spec path.
Every way a command can end — its result, an invalid spec, a held lock, SIGINT or SIGTERM, a bug — ends
here in one message for people (stderr) or one JSON document (stdout, with --json), and a documented exit
code (command.py). Only two small modules of ours are imported before the signal handlers are in place, so
that Ctrl-C at start-up never prints a traceback; each command imports what it needs when it runs.
"""
from __future__ import annotations

import sys

from ds4_converge.cli.command import FAILED, INVALID, OK, CliError
from ds4_converge.core import interrupts

# modules whose COMMANDS make up the CLI, in the order `--help` lists them
COMMAND_MODULES = ("ds4_converge.cli.run_commands", "ds4_converge.cli.service_commands",
                   "ds4_converge.cli.perf_commands", "ds4_converge.cli.host_commands",
                   "ds4_converge.cli.distributed_commands")
USAGE = ("ds4-converge SPEC [--check] [--diff] [--json] [--set KEY=VALUE ...]\n"
         "       ds4-converge COMMAND [options]   (ds4-converge help COMMAND)")


def main(argv: list[str] | None = None) -> int:
    """The `ds4-converge` script: one command, in this process (a plain converge answered from its no-op receipt
    when that still holds)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    import os

    os.umask(os.umask(0o022) | 0o022)  # nothing we make under paths.root is writable by others (core/root_trust.py)
    try:
        interrupts.install()
        return _main(argv)
    except KeyboardInterrupt as exc:  # only if it lands outside _main's own net (one signal raises, ever)
        code = interrupts.exit_code(getattr(exc, "signum", 2))
        return _end(None, "converge", "--json" in argv, code, "interrupted", "interrupted", [], {})
    finally:
        interrupts.restore()


def _main(argv: list[str]) -> int:
    session = None
    name, json_mode, debug = "converge", "--json" in argv, "--debug" in argv
    try:
        name = _command_name(argv)
        commands = registry()
        replayed = _replay_noop(argv, commands)
        if replayed is not None:
            return replayed
        parser = build_parser(commands)
        if not argv:
            from ds4_converge.tool_command import tool_command

            sys.stderr.write(f"usage: {USAGE}\n\nCommands: {', '.join(commands)}.  More: {tool_command()} help\n")
            return INVALID
        parser.json_mode = json_mode
        _no_such_command(argv, commands)
        args = parser.parse_args(normalise(argv, commands))
        command = commands[args.command]
        from ds4_converge.cli.session import Session

        session = Session(command, args)
        args.parser = parser
        return command.run(args, session)  # a run that a signal cut short says so in its own code
    except CliError as exc:
        return _end(session, name, json_mode, exc.code, exc.aborted, exc.message, exc.lines, exc.fields)
    except SystemExit as exc:  # argparse's --help and --version
        return OK if not exc.code else INVALID
    except BrokenPipeError:  # `ds4-converge status SPEC | head -1`: the reader left; say nothing more
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return FAILED
    except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM as interrupts.Interrupted
        signum = getattr(exc, "signum", None) or interrupts.received() or 2
        from signal import Signals

        return _end(session, name, json_mode, interrupts.exit_code(signum), "interrupted",
                    f"interrupted by {Signals(signum).name}", [], {}, serving_note=True)
    except Exception as exc:  # noqa: BLE001 - the safety net: a bug still ends in one message and one document
        known = _known_failure(exc, session)
        if known is not None:  # a failure the tool can name (supervisord that does not answer, a permission)
            return _end(session, name, json_mode, FAILED, "failed", f"{name}: {known}", [], {}, serving_note=True)
        log = _write_traceback(session)
        if debug:
            import traceback

            traceback.print_exc()
        where = f"traceback in {log}" if log else "traceback not written"
        return _end(session, name, json_mode, FAILED, "internal",
                    f"internal error (a bug in ds4-converge): {type(exc).__name__}: {exc}",
                    [] if debug else [f"{where}; --debug prints it here"], {"traceback_log": log},
                    serving_note=True)


def _known_failure(exc: Exception, session) -> str | None:
    """One line for a failure that is no bug: an error the tool raised with its own message (Ds4Error: supervisord
    stopped or unreachable, …) or a permission the host refuses (path and user named). None: a bug."""
    from ds4_converge.errors import Ds4Error

    if isinstance(exc, PermissionError):
        from ds4_converge.cli.session import permission_words

        return permission_words(exc)
    if not isinstance(exc, Ds4Error):
        return None
    from ds4_converge.service.supervisor import SupervisorError

    if isinstance(exc, SupervisorError) and session is not None:
        session.cannot_ask(exc.message)  # what serves: "cannot tell", without waiting on it a second time
    return exc.message


def _replay_noop(argv: list[str], commands) -> int | None:
    """A converged box confirmed from the last no-op's receipt (cli/noop.py); None: run the command."""
    try:
        from ds4_converge.cli import noop

        return noop.replay(argv, commands)
    except Exception:  # noqa: BLE001 - the receipt is an optimisation: whatever fails here, the full path runs
        return None


def normalise(argv: list[str], commands) -> list[str]:
    """`ds4-converge SPEC ...` is `ds4-converge converge SPEC ...`: the main command stays exactly so."""
    if argv and argv[0] not in commands and argv[0] not in ("-h", "--help", "--version"):
        return ["converge", *argv]
    return argv


def _no_such_command(argv: list[str], commands) -> None:
    """`ds4-converge frobnicate`: a word that is no command and cannot be a spec (no such path, no .yaml/.yml ending)
    is named as a mistyped command, as `help frobnicate` does; a path that exists, or a .yaml/.yml one, is a spec."""
    import os

    word = argv[0]
    if word in commands or word.startswith("-") or os.path.lexists(word) or word.endswith((".yaml", ".yml")):
        return
    from ds4_converge.tool_command import tool_command

    raise CliError(INVALID, "usage", f"no command {word!r} and no spec file of that name"
                                     f"{did_you_mean(word, commands)}; commands: {', '.join(commands)} "
                                     f"({tool_command()} help COMMAND)")


def did_you_mean(word: str, commands) -> str:
    """` (did you mean 'status'?)` for a mistyped command (`stauts`), or nothing when none is near."""
    import difflib

    near = difflib.get_close_matches(word, list(commands), n=1, cutoff=0.6)
    return f" (did you mean {near[0]!r}?)" if near else ""


def _command_name(argv: list[str]) -> str:
    return argv[0] if argv and not argv[0].startswith("-") and _is_command(argv[0]) else "converge"


def _is_command(word: str) -> bool:
    try:
        return word in registry()
    except Exception:  # noqa: BLE001 - a broken registry is reported by _main itself
        return False


def _end(session, name: str, json_mode: bool, code: int, aborted: str, message: str, lines: list[str],
         fields: dict, *, serving_note: bool = False) -> int:
    """The one ending of a command that could not give its own result (a signal now is noted, not raised)."""
    with interrupts.shielded():
        return _say_end(session, name, json_mode, code, aborted, message, lines, fields, serving_note)


def _say_end(session, name, json_mode, code, aborted, message, lines, fields, serving_note) -> int:
    if session is not None and session.emitted:
        return code  # the command printed its document already; a late signal changes only the exit code
    serving = session.serving_fields() if session is not None else {"release": None, "endpoint": None}
    if serving_note and session is not None and session.ctx is not None:
        message += f"; serving: {session.serving_words()}"
    unknown = {"serving_unknown": serving["serving_unknown"]} if "serving_unknown" in serving else {}
    if json_mode:
        from ds4_converge.cli import report

        error = "\n".join(lines) if aborted == "invalid" and lines else message
        report.print_json(report.document(name, ok=False, exit_code=code, aborted=aborted, error=error,
                                          release=serving["release"], endpoint=serving["endpoint"], **unknown,
                                          **fields))
        if session is not None:
            session.emitted = True
    else:
        if aborted == "invalid" and lines:
            text = "\n".join(lines)
        else:
            text = "\n".join([f"ds4-converge: {message}", *(f"  {line}" for line in lines)])
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    return code


def _write_traceback(session) -> str | None:
    """Under ROOT/logs when the root is known and writable, else a temporary file; None if neither works."""
    import os
    import tempfile
    import time
    import traceback

    text = f"{time.strftime('%Y-%m-%d %H:%M:%S')} ds4-converge {' '.join(sys.argv[1:])}\n{traceback.format_exc()}\n"
    logs = session.ctx.layout.logs if session is not None and session.ctx is not None else None
    if logs is not None and logs.is_dir():
        try:
            with open(logs / "errors.log", "a") as handle:
                handle.write(text)
            return str(logs / "errors.log")
        except OSError:
            pass
    try:
        fd, path = tempfile.mkstemp(prefix="ds4-converge-error-", suffix=".log")
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        return path
    except OSError:
        return None


# ---------------------------------------------------------------------------------------------- the parser

_REGISTRY: dict | None = None


def registry() -> dict:
    """{name: Command} of every command, `help` included."""
    global _REGISTRY
    if _REGISTRY is None:
        import importlib

        from ds4_converge.cli.command import Command

        found = {}
        for module in COMMAND_MODULES:
            for command in importlib.import_module(module).COMMANDS:
                found[command.name] = command
        found["help"] = Command("help", "show help: of ds4-converge, or of one COMMAND", _help,
                                add_arguments=lambda p: p.add_argument("topic", nargs="?", metavar="COMMAND",
                                                                       help="the command to explain"),
                                takes_spec=False, json=False,
                                epilog="exit codes:\n    0  shown\n    2  no such command, or usage")
        _REGISTRY = found
    return _REGISTRY


def _help(args, session) -> int:
    parser = args.parser
    if not args.topic:
        parser.print_help()
        return OK
    sub = parser.subparsers.choices.get(args.topic)
    if sub is None:
        sys.stderr.write(f"ds4-converge: no command {args.topic!r}{did_you_mean(args.topic, registry())}; "
                         f"commands: {', '.join(registry())}\n")
        return INVALID
    sub.print_help()
    return OK


WIDE = 100  # help text is wrapped to the terminal, at most this wide


def build_parser(commands: dict, width: int | None = None):
    import argparse
    import textwrap

    width = width or _width()

    def _wrap(text: str) -> str:
        return textwrap.fill(text, width=width)

    from ds4_converge.cli.exit_codes import MEANINGS

    class Parser(argparse.ArgumentParser):
        def error(self, message):  # usage errors end like every other error: one message or one document
            raise CliError(INVALID, "usage", f"{message} (usage: {self.format_usage().strip().removeprefix('usage: ')})")

    codes = "\n".join(f"  {code:>3}  {meaning}" for code, meaning in MEANINGS.items())
    parser = Parser(prog="ds4-converge", usage=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter,
                    description=_wrap("Converge this box to SPEC: build the pinned ds4 engine, switch it under "
                                "supervisord, probe it, and revert to the last good release when it is not "
                                "healthy. `ds4-converge SPEC` is `ds4-converge converge SPEC`."),
                    epilog=f"exit codes (each command's help lists its own):\n{codes}\n\n" + _wrap(
                        "Output: results on stdout, progress and errors on stderr; with --json, stdout is "
                        "one JSON document whatever happens."))
    class Version(argparse.Action):  # importlib.metadata only when asked: start-up time
        def __call__(self, parser, namespace, values, option_string=None):
            if getattr(parser, "json_mode", False):  # --version --json: one document, as --json promises
                from ds4_converge.cli import report

                report.print_json(report.document("version", ok=True, exit_code=OK, version=_version()))
            else:
                sys.stdout.write(f"ds4-converge {_version()}\n")
            parser.exit()

    parser.add_argument("--version", action=Version, nargs=0, help="print the version of ds4-converge and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands", parser_class=Parser)
    parser.subparsers = subparsers
    for command in commands.values():
        sub = subparsers.add_parser(command.name, prog=f"ds4-converge {command.name}", help=command.summary,
                                    description=_wrap(command.description or command.summary),
                                    epilog=command.epilog or None,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        if command.takes_spec:
            sub.add_argument("spec", metavar="SPEC", help="the spec YAML file (relative paths in it are relative to it)")
            sub.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                             help="override a spec value, read as YAML (repeatable), e.g. --set server.ctx=65536; "
                                  "--set engine.ref=X replaces engine.installer, and the other way round")
        command.add_arguments(sub)
        if command.json:
            sub.add_argument("--json", action="store_true",
                             help="print one JSON document on stdout and nothing else, whatever happens "
                                  "(schema: ds4_converge/cli/report.schema.json)")
        sub.add_argument("--debug", action="store_true",
                         help="print the traceback of an internal error here (it is always written to a log)")
    return parser


def _width() -> int:
    import shutil

    return min(WIDE, shutil.get_terminal_size().columns - 2)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ds4-converge")
    except PackageNotFoundError:
        return "unknown"
