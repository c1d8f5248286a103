"""What a run shows while it goes: each role's line as it finishes, and the long waits as they happen.

Streams (docs/cli.md, "Output"): the result (role lines, recap, tables, the --json document) goes to stdout;
progress and error messages go to stderr. Three modes:

- ``live`` (stderr is a terminal): a rich live line under the role lines — what runs now, for how long, and
  the last line of the log it writes (the build log while building, the engine's log while it loads);
- ``plain`` (anything else: journald, Ansible, a pipe): timestamped lines, and every ``interval`` seconds of
  a long wait one line with the elapsed time and the log's last line;
- ``quiet`` (--json): nothing but the final document.

The reporter reads the Context only (which role runs comes from the reconciler's callbacks, which log to
follow from the layout): the roles know nothing of it.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from ds4_converge.cli import report

TAIL_BYTES = 8192
ENGINE_ROLES = ("service", "probe", "rollback")  # the roles during which the engine (re)starts


def mode_for(json_mode: bool, stream=None) -> str:
    stream = stream or sys.stderr
    if json_mode:
        return "quiet"
    if stream.isatty() and os.environ.get("TERM") != "dumb":
        return "live"
    return "plain"


def stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def plain_line(line: report.Line, *, stamped: bool, now: str | None = None) -> str:
    """A result line in plain mode: the first line of a role carries the time, the others are indented under it."""
    now = now or stamp()
    return (f"{now} " if stamped else " " * (len(now) + 1)) + report.text_of(line)


def last_line(path: Path | None, offset: int) -> str:
    """The last non-empty line written to `path` after byte `offset` ('' when none)."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            start = max(offset if offset <= size else 0, size - TAIL_BYTES)
            handle.seek(start)
            data = handle.read()
    except OSError:
        return ""
    lines = [line for line in data.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip()[:200] if lines else ""


def _size(path: Path | None) -> int:
    try:
        return path.stat().st_size if path else 0
    except OSError:
        return 0


class Reporter:
    """Wired into a Context by :meth:`attach`; :meth:`close` ends the live display."""

    def __init__(self, mode: str, *, interval: float = 10.0, out=None, err=None):
        self.mode, self.interval = mode, interval
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.ctx = None
        self.extra_lines = None  # callable(result) -> lines printed under a role's line (the config diff)
        self._lock = threading.RLock()
        self._role: str | None = None
        self._engine_touched = False  # a role that (re)starts the engine ran: a revert after it follows its log
        self._activity = ""
        self._since = time.monotonic()
        self._last_print = time.monotonic()
        self._log: Path | None = None
        self._log_offset = 0
        self._live = None
        self._consoles = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ wiring

    def attach(self, ctx) -> None:
        self.ctx = ctx
        ctx.say = self.say
        ctx.on_role_start = self.role_started
        ctx.on_role_done = self.role_done
        ctx.progress = self.mode == "live"  # the models role draws its own download bars then
        if self.mode == "plain" and self.interval > 0:
            self._thread = threading.Thread(target=self._heartbeat, name="ds4c-progress", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            self._stop_live()
            self._role = None

    # ------------------------------------------------------------------ events

    def role_started(self, name: str) -> None:
        with self._lock:
            self._role = name
            self._engine_touched |= name in ENGINE_ROLES
            self._begin(f"{name} …" if name else "")
            if self.mode == "live" and name != "models":  # downloads draw their own progress bars
                self._start_live()

    def role_done(self, result) -> None:
        with self._lock:
            self._stop_live()
            if self.mode == "quiet":
                return
            lines = report.role_lines(result, check=bool(self.ctx and self.ctx.check))
            if self.extra_lines:
                lines[1:1] = self.extra_lines(result)
            for i, line in enumerate(lines):
                self._print_result(line, stamped=i == 0)
            self._role = None
            self._begin("")

    def say(self, message: str) -> None:
        """A step inside a role ('building …', 'probing … (deadline 60s, soak 3s)'): a new activity."""
        with self._lock:
            self._begin(message)
            if self.mode == "quiet":
                return
            if self.mode == "plain":
                self._write(self.err, f"{stamp()} … {message}")
            else:
                self._consoles_pair()[1].print(f"[dim]… {report.escape(message)}[/]")
                if self._role and self._role != "models":
                    self._start_live()

    def wait_line(self) -> str:
        """One line about the current wait: what, for how long, and the last log line."""
        what, log_line = self._wait()
        return f"{what} · {log_line}" if log_line else what

    def _wait(self) -> tuple[str, str]:
        # no lock here: rich's refresh thread calls this holding the Live's lock, which the main thread takes
        # while holding ours (stopping the display); reading a few attributes needs none
        activity, since, log, offset, role = self._activity, self._since, self._log, self._log_offset, self._role
        what = f"{activity or 'working'} · {report.duration(time.monotonic() - since)}"
        if role == "models":
            return what, self._download_line()
        line = last_line(log, offset)
        return what, f"{log.name}: {line}" if line else ""

    def _download_line(self) -> str:
        """How far the download that runs now got: the newest partial file where models land."""
        from ds4_converge.models.download import PARTIAL_SUFFIX
        from ds4_converge.models.placement import dest_is_file
        from ds4_converge.units import human_bytes

        ctx = self.ctx
        try:
            entries = [getattr(ctx.spec.model, role) for role in ("main", "mtp", "dspark")]
            directories = {ctx.layout.models} | {
                ctx.host_path(e.dest).parent if dest_is_file(e.dest) else ctx.host_path(e.dest)
                for e in entries if e is not None and e.dest}
            partials = [p for d in directories for p in d.glob(f"*{PARTIAL_SUFFIX}")]
            newest = max(partials, key=lambda p: p.stat().st_mtime)
            return f"{newest.name}: {human_bytes(newest.stat().st_size)} so far"
        except (OSError, ValueError, AttributeError):  # nothing downloading yet, or it just finished
            return ""

    # ------------------------------------------------------------------ internals

    def _begin(self, activity: str) -> None:
        self._activity, self._since = activity, time.monotonic()
        self._log = self._log_to_follow()
        self._log_offset = _size(self._log)

    def _log_to_follow(self) -> Path | None:
        """The build log while the engine builds, the engine's log while it (re)starts, loads and soaks."""
        ctx = self.ctx
        if ctx is None:
            return None
        if self._role == "engine" and ctx.build is not None:
            return ctx.layout.build_log(ctx.build.release_id)
        if self._role in ENGINE_ROLES or (self._role is None and self._engine_touched):
            return ctx.layout.engine_log(ctx.spec.server.name)
        return None

    def _heartbeat(self) -> None:
        while not self._stop.wait(min(1.0, self.interval)):
            try:
                with self._lock:
                    due = self._activity and time.monotonic() - self._last_print >= self.interval
                if due:
                    self._write(self.err, f"{stamp()} … {self.wait_line()}")
            except Exception:  # noqa: BLE001 - progress is best effort: a closed stderr must not print a traceback
                return

    def _write(self, stream, line: str) -> None:
        with self._lock:
            stream.write(line + "\n")
            stream.flush()
            self._last_print = time.monotonic()

    def _print_result(self, line: report.Line, *, stamped: bool) -> None:
        """A line of the result: stdout, through the live console when both streams share the terminal."""
        if self.mode == "plain":
            self._write(self.out, plain_line(line, stamped=stamped))
            return
        out, err = self._consoles_pair()
        # one screen: keep the live line below the results
        (err if self.out.isatty() else out).print(report.markup_of(line))

    def _consoles_pair(self):
        if self._consoles is None:
            self._consoles = (report.console(self.out), report.console(self.err))
        return self._consoles

    def _start_live(self) -> None:
        if self._live is not None:
            return
        from rich.console import Group
        from rich.live import Live
        from rich.spinner import Spinner
        from rich.text import Text

        spinner = Spinner("dots", style="cyan")

        def render():
            what, log_line = self._wait()
            spinner.text = Text(what, no_wrap=True, overflow="ellipsis")
            if not log_line:
                return spinner
            return Group(spinner, Text(f"  {log_line}", style="dim", no_wrap=True, overflow="ellipsis"))

        self._live = Live(get_renderable=render, console=self._consoles_pair()[1], refresh_per_second=4,
                          transient=True, redirect_stdout=False, redirect_stderr=False)
        self._live.start()

    def _stop_live(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
