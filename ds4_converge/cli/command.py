"""What a subcommand is and how it ends when it cannot give its result (exit codes: exit_codes.py).

A command module lists its commands in ``COMMANDS``; ``main.COMMAND_MODULES`` names the modules. Adding a
subcommand is a :class:`Command` in one of them (or a new module added to that tuple): its arguments, its
``run(args, session) -> exit code``, one line of help. Modules stay light to import (start-up time): what a
command needs beyond the standard library it imports inside ``run``.
"""
from __future__ import annotations

from collections.abc import Callable

from ds4_converge.cli.exit_codes import FAILED, INVALID, LOCKED, MEANINGS, NEVER_CONVERGED, OK  # noqa: F401


class Command:
    """A plain class, not a dataclass: the CLI imports this module on every run, and dataclasses' import is a
    noticeable part of a no-op's time (cli/noop.py)."""

    def __init__(self, name: str, summary: str, run: Callable, *, add_arguments: Callable = lambda parser: None,
                 description: str = "", takes_spec: bool = True, json: bool = True, epilog: str = ""):
        self.name = name
        self.summary = summary  # one line in `ds4-converge --help`
        self.run = run  # (argparse.Namespace, Session) -> exit code
        self.add_arguments = add_arguments
        self.description = description  # shown by `ds4-converge help NAME` (default: the summary)
        self.takes_spec = takes_spec  # SPEC and --set
        self.json = json  # --json: one JSON document on stdout, whatever happens
        self.epilog = epilog  # e.g. this command's exit codes


class CliError(Exception):
    """The command cannot give its result: one message for people, one document for programs.

    ``aborted`` says why in one word (it is the report's ``aborted`` field); ``fields`` go into the report
    (``problems`` of an invalid spec, ``holder_pid`` of a held lock, …).
    """

    def __init__(self, code: int, aborted: str, message: str, *, lines: list[str] = (), **fields):
        super().__init__(message)
        self.code, self.aborted, self.message = code, aborted, message
        self.lines = list(lines)  # printed after the message, one per line (an invalid spec's problems)
        self.fields = fields
