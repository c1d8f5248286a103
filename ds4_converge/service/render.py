"""Render supervisord and systemd files with jinja2, so no value can break the INI file or the command line.

A converged box renders the same text from the same values on every run: :class:`RenderCache` keeps each text
under a digest of everything it came from (this module, the template, the values), so a no-op run compares
its files without loading jinja2.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
from functools import cache
from pathlib import Path

from ds4_converge.core.layout import Layout, write_atomic
from ds4_converge.errors import Ds4Error
from ds4_converge.service.supervisor import IGNORES_FIRST_TERM, guard_argv, watchdog_argv
from ds4_converge.core import bounded_file

# configparser (as supervisor sets it up) starts an inline comment at ';' or '#' after whitespace
INLINE_COMMENT = re.compile(r"(?<=\s)(?=[;#])")


class UnsafeValue(Ds4Error, ValueError):
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
def _templates():
    import jinja2
    from importlib.resources import files

    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(files("ds4_converge.templates"))),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False,
                              finalize=ini_value)


def _render(template: str, values: dict) -> str:
    return _templates().get_template(template).render(**values)


@cache
def _source(path: Path) -> bytes:
    return path.read_bytes()


class RenderCache:
    """JSON file {"version": 1, "texts": {digest: text}}. Only texts used by the last run that flushed are kept,
    so it never grows; unreadable means empty. Learned in memory, written by :meth:`flush`."""

    VERSION = 1

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._texts: dict[str, str] | None = None
        self._used: dict[str, str] = {}

    def render(self, template: str, values: dict) -> str:
        digest = hashlib.sha256(b"\0".join([
            _source(Path(__file__).resolve()), _source(_template_path(template)),
            json.dumps(values, sort_keys=True, default=str).encode()])).hexdigest()
        text = self._load().get(digest)
        if text is None:
            text = _render(template, values)
        self._used[digest] = text
        return text

    def flush(self) -> None:
        if self._used and self._used != self._load():
            write_atomic(self.path, json.dumps({"version": self.VERSION, "texts": self._used}, indent=1,
                                               sort_keys=True) + "\n")
            self._texts = dict(self._used)

    def _load(self) -> dict[str, str]:
        if self._texts is None:
            try:
                data = bounded_file.read_json(self.path)
                texts = data["texts"] if data.get("version") == self.VERSION else {}
                self._texts = {k: v for k, v in texts.items() if isinstance(k, str) and isinstance(v, str)}
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                self._texts = {}
        return self._texts


@cache
def _template_path(template: str) -> Path:
    from importlib.resources import files

    return Path(str(files("ds4_converge.templates") / template))  # where jinja2 loads it from


def _via(cache: RenderCache | None, template: str, values: dict) -> str:
    return cache.render(template, values) if cache is not None else _render(template, values)


def supervisord_conf(layout: Layout, *, nodaemon: bool = False, front: list[str] | None = None,
                     cache: RenderCache | None = None) -> str:
    """front: HAProxy's argv, when the spec has a front door (a program of this supervisord)."""
    return _via(cache, "supervisord.conf.j2", dict(
        socket=layout.socket, logs=layout.logs, logfile=layout.supervisord_log, pidfile=layout.supervisord_pid,
        root=layout.root, programs=layout.program_dir, nodaemon=nodaemon,
        guard=command_line(guard_argv(layout.root)), watchdog=command_line(watchdog_argv(layout.root)),
        front=command_line(front) if front else ""))


def render_front(values: dict, cache: RenderCache | None = None) -> str:
    """HAProxy's config: every value comes quoted for HAProxy already (service/front.py)."""
    return _via(cache, "haproxy.cfg.j2", values)


def program_conf(*, name: str, release: str, argv: list[str], directory: str, log: str, user: str | None,
                 stop_wait_s: int, ignores_first_term: bool = False, environment: str = "", watchdog: bool = True,
                 cache: RenderCache | None = None) -> str:
    """ignores_first_term: a ds4 distributed worker; the supervisor sends it a SIGTERM before its stop.
    `environment`: supervisord's environment= value, already quoted (sealed secrets, service/secrets.py)."""
    return _via(cache, "program.conf.j2", dict(
        name=name, release=release, command=command_line(argv), directory=directory, log=log, user=user,
        stop_wait_s=stop_wait_s, ignores_first_term=IGNORES_FIRST_TERM if ignores_first_term else "",
        environment=Quoted(environment), watchdog=watchdog))


def systemd_unit(*, name: str, command: str, stop_wait_s: int, cache: RenderCache | None = None) -> str:
    return _via(cache, "systemd.service.j2", dict(name=name, command=command, stop_wait_s=stop_wait_s))


def read_program_conf(text: str) -> tuple[str | None, list[str], list[str]]:
    """(release, argv, model files) of a program file this module rendered: what runs, when state.json is lost.

    The inverse of program_conf: supervisor turns '%%' back into '%' and splits `command=` with shlex."""
    release, argv, models = None, [], []
    for line in text.splitlines():
        if line.startswith("; ds4-server for release "):
            release = line.removeprefix("; ds4-server for release ").split(" ", 1)[0]
        elif line.startswith("command="):
            try:
                argv = shlex.split(line.removeprefix("command=").replace("%%", "%"))
            except ValueError:
                argv = []
        elif line.startswith("; model ") and ": inode " in line:
            models.append(line.removeprefix("; model ").rsplit(": inode ", 1)[0])
    return release, argv, models
