"""What a subcommand is and how it ends when it cannot give its result (exit codes: exit_codes.py).

A command module lists its commands in ``COMMANDS``; ``main.COMMAND_MODULES`` names the modules. Adding a
subcommand is a :class:`Command` in one of them (or a new module added to that tuple): its arguments, its
``run(args, session) -> exit code``, one line of help. Modules stay light to import (start-up time): what a
command needs beyond the standard library it imports inside ``run``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ds4_converge.cli.exit_codes import FAILED, INVALID, LOCKED, MEANINGS, NEVER_CONVERGED, OK  # noqa: F401


@dataclass(frozen=True)
class Command:
    name: str
    summary: str  # one line in `ds4-converge --help`
    run: Callable  # (argparse.Namespace, Session) -> exit code
    add_arguments: Callable = lambda parser: None
    description: str = ""  # shown by `ds4-converge help NAME` (default: the summary)
    takes_spec: bool = True  # SPEC and --set
    json: bool = True  # --json: one JSON document on stdout, whatever happens
    epilog: str = ""  # e.g. this command's exit codes


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
