"""One invocation of a command: its arguments, how it prints, and what it loaded (for reports, errors included)."""
from __future__ import annotations

import contextlib
import json
import os
import sys
from datetime import datetime, timezone

from ds4_converge.cli.command import FAILED, INVALID, LOCKED, CliError
from ds4_converge.core.layout import LAST_RUN  # under ROOT/logs: the last converge or rollback


class Session:
    def __init__(self, command, args):
        self.command, self.args = command, args
        self.json = bool(getattr(args, "json", False))
        self.emitted = False  # the --json document was printed: nothing may follow it on stdout
        self.loaded = None  # LoadedSpec, once read
        self.ctx = None  # Context, once made
        self.document = None  # the report of a converge or rollback, once made
        self.serving_unknown = None  # why serving() could not ask supervisord, once it could not
        self._out = self._err = None

    # ------------------------------------------------------------------ printing

    @property
    def out(self):
        if self._out is None:
            from ds4_converge.cli.report import console

            self._out = console(sys.stdout)
        return self._out

    @property
    def err(self):
        if self._err is None:
            from ds4_converge.cli.report import console

            self._err = console(sys.stderr)
        return self._err

    def emit(self, document: dict) -> None:
        """Print the command's one JSON document, whole: a signal meanwhile is noted, not raised."""
        from ds4_converge.cli.report import print_json
        from ds4_converge.core import interrupts

        with interrupts.shielded():
            if not self.emitted:
                print_json(document)
                self.emitted = True

    def say(self, text: str) -> None:
        """A plain line for people on stdout (no markup)."""
        self.out.print(text, markup=False)

    def err_line(self, text: str) -> None:
        """A progress line for people on stderr, as a converge's waits print them."""
        self.err.print(f"… {text}", markup=False, highlight=False)

    # ------------------------------------------------------------------ spec and context

    def load_spec(self):
        if self.loaded is None:
            from ds4_converge.spec.loader import SpecInvalid, load_spec

            try:
                self.loaded = load_spec(self.args.spec, self.args.overrides)
            except SpecInvalid as exc:
                raise CliError(INVALID, "invalid", f"{self.args.spec}: invalid spec", lines=exc.problems,
                               problems=[p.to_json() for p in exc.located]) from None
        return self.loaded

    def context(self, **kwargs):
        """The run's Context; a spec path that cannot be placed on this host is an invalid spec (exit 2)."""
        if self.ctx is None:
            from ds4_converge.orchestrate.context import make_context
            from ds4_converge.spec.hostpaths import UnknownVariable
            from ds4_converge.spec.loader import SpecInvalid

            loaded = self.load_spec()
            try:
                self.ctx = make_context(loaded, say=lambda message: None, **kwargs)
                self.ctx.command = getattr(self.command, "name", None) or "converge"
            except SpecInvalid as exc:  # the spec does not fit this host (an unknown server.user, paths.root)
                raise CliError(INVALID, "invalid", f"{self.args.spec}: invalid spec", lines=exc.problems,
                               problems=[p.to_json() for p in exc.located]) from None
            except UnknownVariable as exc:
                raise self._invalid("paths.root", str(exc)) from None
            except KeyError as exc:  # pwd.getpwnam: the service user does not exist here
                user = loaded.spec.server.user
                raise self._invalid("server.user", f"no user {user!r} on this host ({exc})") from None
        return self.ctx

    def _invalid(self, field: str, message: str) -> CliError:
        from ds4_converge.spec.loader import Problem

        problem = Problem(message, file=str(self.args.spec), field=field)
        return CliError(INVALID, "invalid", f"{self.args.spec}: invalid spec", lines=[str(problem)],
                        problems=[problem.to_json()])

    def lock(self, *, read_only: bool = False, stopping: bool = False):
        """`stopping`: for `stop`, which must stop what runs even when a release under the root cannot be
        trusted (it runs nothing from one)."""
        from ds4_converge.core.lock import RunLock

        return _Lock(RunLock(self.ctx.layout.lock_file, read_only=read_only), self.ctx.layout, stopping=stopping)

    # ------------------------------------------------------------------ what serves now

    def snapshot(self, *, front: bool = False):
        """What serves under this root now (service/snapshot.py: the one reader of it), read anew (`front`: with
        the front door's slot); None before there is a Context. Never raises: a report about a failure must still
        be written when supervisord cannot be asked, and once it could not, it is not asked again (a stopped
        supervisord would cost the same bound again)."""
        from ds4_converge.service import snapshot

        ctx = self.ctx
        if ctx is None:
            return None
        if self.serving_unknown:
            return snapshot.unknown(ctx.spec.server.name, self.serving_unknown, root=ctx.layout.root,
                                    state=ctx.state)
        now = snapshot.read(ctx.layout, ctx.supervisor, ctx.spec, ctx.state, settle=SUPERVISORD_SETTLE_S,
                            front=front)
        if now.unknown is not None:  # a root this user may not look into: why, in words
            denied = isinstance(now.error, PermissionError)
            self.serving_unknown = permission_words(now.error, advice=False) if denied else now.unknown
        return now

    def serving_fields(self, now=None) -> dict:
        """A document's release and endpoint (of `now`, else of a snapshot read now); with `serving_unknown` when
        supervisord could not be asked, so that null reads "cannot tell", never "nothing"."""
        now = now or self.snapshot()
        if now is None:
            return {"release": None, "endpoint": None}
        fields = {"release": now.release(), "endpoint": now.endpoint()}
        if now.unknown is not None:
            fields["serving_unknown"] = self.unknown_words()
        return fields

    def serving_words(self) -> str:
        """What serves, for people: "release R on URL", "nothing", or "cannot tell (why …)"."""
        fields = self.serving_fields()
        if "serving_unknown" in fields:
            return f"cannot tell ({fields['serving_unknown']})"
        return f"release {fields['release']} on {fields['endpoint']}" if fields["release"] else "nothing"

    def unknown_words(self) -> str:
        """Why what serves is not known, and what is known all the same: whether the endpoint of the release this
        root started last answers (an engine keeps serving while its supervisord is stopped)."""
        words = self.serving_unknown or "supervisord could not be asked"
        current = self.ctx.state.current if self.ctx is not None else None
        if current is None or not current.endpoint:
            return words
        from ds4_converge.health.probe import NotListening, NotReady, Unhealthy, check_models

        try:
            check_models(current.endpoint, timeout=3)
        except NotListening:
            return f"{words}; nothing answers on {current.endpoint} (release {current.release}, started last)"
        except (NotReady, Unhealthy, OSError) as exc:
            return f"{words}; {current.endpoint} (release {current.release}, started last) does not answer right: {exc}"
        return f"{words}; {current.endpoint} answers /v1/models (release {current.release}, started last)"

    def cannot_ask(self, why: str) -> None:
        """supervisord could not be asked (a command failed on it): serving() says "unknown" without asking again."""
        self.serving_unknown = why

    # ------------------------------------------------------------------ the last run, for `status` and `logs`

    def record_run(self, document: dict) -> None:
        """Keep the report of a converge or rollback that may have changed something (best effort)."""
        ctx = self.ctx
        if ctx is not None and ctx.layout.root.is_dir():
            write_last_run(ctx.layout.logs, document)

    def last_run(self) -> dict | None:
        from ds4_converge.core import bounded_file
        from ds4_converge.core.state import MAX_STATE_BYTES

        try:  # bounded and never blocking like every record under the root: a bad one is no last run
            record = bounded_file.load_json(bounded_file.read(self.ctx.layout.logs / LAST_RUN, MAX_STATE_BYTES,
                                                              "a record"))
        except (OSError, ValueError, AttributeError):
            return None
        return record if isinstance(record, dict) and {"command", "ok", "finished_at"} <= set(record) else None


SUPERVISORD_SETTLE_S = 30  # a reloading supervisord is waited for (Supervisor.is_running's own bound)


class _Lock:
    """RunLock whose `LockHeld` is a CliError (exit 3) naming the holder. It first makes sure the root can be
    trusted (core/root_trust.py): no link, no folder another user owns or can write, before its first write."""

    def __init__(self, lock, layout, *, stopping: bool = False):
        self.lock, self.layout, self.stopping = lock, layout, stopping

    def acquire(self):
        from ds4_converge.core import root_trust
        from ds4_converge.core.lock import LockHeld

        try:
            root_trust.check(self.layout, releases=not self.stopping)
        except root_trust.UntrustedRoot as exc:
            raise CliError(FAILED, "failed", f"preflight: {exc}") from None
        try:
            return self._acquire_after_the_guard()
        except LockHeld as exc:
            holder = exc.holder.strip()
            raise CliError(LOCKED, "locked", str(exc), holder_pid=int(holder) if holder.isdigit() else None) from None
        except PermissionError as exc:
            raise CliError(FAILED, "failed", f"cannot open the run lock: {permission_words(exc)}") from None
        except OSError as exc:  # a link (ELOOP: opened without following), a FIFO, a read-only root …
            raise CliError(FAILED, "failed", f"cannot open the run lock {self.lock.path}: {exc.strerror}") from None

    def _acquire_after_the_guard(self):
        """The switch guard holds the lock only while it puts last good back after a run died mid-switch (a re-run
        right after a SIGKILL): wait for it, bounded and saying why, instead of failing as if another run held it."""
        import time

        from ds4_converge.core.lock import LockHeld

        deadline, said = time.monotonic() + GUARD_WAIT_S, False
        while True:
            try:
                return self.lock.acquire()
            except LockHeld as exc:
                guard = _guard_pid(exc.holder)
                if guard is None or time.monotonic() > deadline:
                    if guard is not None:
                        raise LockHeld(exc.path, f"{guard}, the switch guard, still restoring last good after "
                                                 f"{GUARD_WAIT_S}s; see ROOT/logs/switch-guard.log") from None
                    raise
                if not said:
                    sys.stderr.write(f"ds4-converge: waiting (up to {GUARD_WAIT_S}s) for the switch guard "
                                     f"(pid {guard}): it is putting last good back after a run died during a "
                                     f"switch\n")
                    sys.stderr.flush()
                    said = True
                time.sleep(0.2)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.lock.__exit__(*exc)


GUARD_WAIT_S = 90  # the guard's restore: a short stop (SIGKILL after 5 s), supervisord's reload, a start


def _guard_pid(holder: str) -> int | None:
    """The PID of the lock's holder when it is a switch guard (service/guard.py, run by supervisord)."""
    for pid in holder.replace(",", " ").split():
        try:
            argv = open(f"/proc/{int(pid)}/cmdline", "rb").read().split(b"\0")
        except (OSError, ValueError):
            continue
        if b"ds4_converge.service.guard" in argv:
            return int(pid)
    return None


def write_last_run(logs, document: dict) -> None:
    """ROOT/logs/last-run.json, and the fleet's facts of a converge or rollback."""
    write_run_record(logs, document)
    from ds4_converge.cli import fleet_facts

    if not document.get("check"):
        fleet_facts.record_revert(logs, document)
        fleet_facts.after_run(logs.parent, document, healthy=bool(document["ok"] or document.get("reverted")))


def write_run_record(logs, document: dict) -> None:
    """ROOT/logs/last-run.json: atomic but not fsynced (a record lost to a power cut costs nothing, a no-op run
    stays fast). `stop` writes one too, so that `status` can say the box was stopped on purpose."""
    record = {"command": document["command"], "ok": document["ok"], "error": document.get("error"),
              "release": document.get("release"), "finished_at": _now()}
    path = logs / LAST_RUN
    tmp = path.with_name(f".{LAST_RUN}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(record, indent=2) + "\n")
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def permission_words(exc: PermissionError, *, advice: bool = True) -> str:
    """"permission denied: PATH (owned by O, mode M) for user U (uid N)": what a person needs to fix it. A path
    that does not exist is named with the folder that refused it (one above it not to be entered, or the one it
    could not be created in)."""
    import pwd

    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        user = "?"
    where, refused = exc.filename or "?", exc.filename
    if isinstance(exc.filename, str) and not os.path.lexists(exc.filename):
        parents = _parents(exc.filename)
        closed = [p for p in parents if os.path.isdir(p) and not os.access(p, os.X_OK)]
        if closed:
            where = refused = closed[0]
        elif parents and os.path.isdir(parents[-1]) and not os.access(parents[-1], os.W_OK):
            refused = parents[-1]
            where = f"{exc.filename}: cannot be created in {refused}"
    try:
        st = os.stat(refused, follow_symlinks=False) if isinstance(refused, str) else None
    except OSError:
        st = None
    if st is not None:
        from ds4_converge.core.file_kind import owner_words

        where = f"{where} ({owner_words(st)})"
    return (f"permission denied: {where} for user {user} (uid {os.geteuid()})"
            + ("; run as a user who may use this root (its owner, or root)" if advice else ""))


def _parents(path: str) -> list[str]:
    """/a/b/c -> ["/a", "/a/b"]: the folders a lookup of `path` walks through, top first."""
    parts = path.split("/")[1:-1]
    return ["/" + "/".join(parts[:i + 1]) for i in range(len(parts))]
