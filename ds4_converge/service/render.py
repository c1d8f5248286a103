"""Render supervisord and systemd files with jinja2, so no value can break the INI file or the command line."""
from __future__ import annotations

import re
import shlex
from functools import cache
from importlib.resources import files

import jinja2

from ds4_converge.core.layout import Layout

# configparser (as supervisor sets it up) starts an inline comment at ';' or '#' after whitespace
INLINE_COMMENT = re.compile(r"(?<=\s)(?=[;#])")


class UnsafeValue(ValueError):
    pass


class Quoted(str):
    """Already made safe (a command line): rendered as is."""


def ini_value(value: object) -> str:
    """A plain INI value: `%` is supervisor's interpolation, newlines and inline comments would cut it."""
    if isinstance(value, Quoted):
        return value
    text = str(value)
    if any(ch in text for ch in "\n\r\x00"):
        raise UnsafeValue(f"{text!r}: newlines cannot be written into supervisor's config")
    if INLINE_COMMENT.search(text) or text != text.strip() or "%(" in text:
        raise UnsafeValue(f"{text!r}: would be cut by the INI parser (comment or edge whitespace)")
    return text.replace("%", "%%")


def command_line(argv: list[str]) -> str:
    """shlex-quote each argument (supervisor splits `command=` with shlex), never letting ' ;' or ' #' appear."""
    for arg in argv:
        if any(ch in arg for ch in "\n\r\x00"):
            raise UnsafeValue(f"{arg!r}: newlines cannot be passed on supervisor's command line")
    quoted = ("".join(shlex.quote(part) for part in INLINE_COMMENT.split(arg)) if arg else "''" for arg in argv)
    # supervisor expands '%' and first replaces any literal "%(here)s": break "%(" with an empty quote pair
    return Quoted(" ".join(quoted).replace("%", "%%").replace("%%(", "%%''("))


@cache
def _templates() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(files("ds4_converge.templates"))),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False,
                             finalize=ini_value)
    return env


def supervisord_conf(layout: Layout, *, nodaemon: bool = False) -> str:
    return _templates().get_template("supervisord.conf.j2").render(
        socket=layout.socket, logs=layout.logs, logfile=layout.supervisord_log, pidfile=layout.supervisord_pid,
        root=layout.root,
        programs=layout.program_dir, nodaemon=nodaemon)


def program_conf(*, name: str, release: str, argv: list[str], directory: str, log: str, user: str | None,
                 stop_wait_s: int) -> str:
    return _templates().get_template("program.conf.j2").render(
        name=name, release=release, command=command_line(argv), directory=directory, log=log, user=user,
        stop_wait_s=stop_wait_s)


def systemd_unit(*, name: str, command: str, stop_wait_s: int) -> str:
    return _templates().get_template("systemd.service.j2").render(name=name, command=command,
                                                                  stop_wait_s=stop_wait_s)
