"""The watchdog between runs: an engine that stops answering, or exits when nobody asked it to, is restarted.

Nothing else watches a converged box until someone converges again: an engine sent SIGTERM from outside drains
and exits 0, a hung one (SIGSTOP, a wedged driver) keeps its PID and answers nothing. The watchdog is a program
of supervisord's own, like the switch guard (`[program:ds4c.watchdog]` in supervisord.conf, `python -m
ds4_converge.service.watchdog ROOT`), so it runs whatever ends a run and starts again at boot. Like Nomad's
check_restart:

- every health.watchdog.interval_s it asks /v1/models, and every completion_every_s a one-token completion;
- after `failures` failed checks in a row, or at once when supervisord shows the engine EXITED or FATAL (no
  stop was ordered: an ordered stop leaves it STOPPED), it restarts the engine: a short grace then SIGKILL for
  one that does not answer, and supervisord starts it again exactly as its program file says;
- restarts back off (interval_s x 2^n, at most backoff_max_s) until a check passes again, and failures to
  answer are not counted while a restarted engine loads (health.deadline_s);
- never while a converge holds the run lock, or a switch is in flight (the guard's intent): a run owns the box;
- each incident is one JSON line in ROOT/logs/incidents.jsonl (when, the cause, what it did, the PIDs), which
  `status` and the fleet textfile show.

What it watches is ROOT/run/watch.json, written when a switch commits (service.switch.commit) and removed by
`stop`: without it the watchdog idles. supervisord's own autorestart is off while the watchdog is on (it would
restart an exit 0 nobody counted); with health.watchdog.enabled false it is `autorestart=true`, so an exit 0
from outside is still restarted.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ds4_converge.core.layout import Layout, write_atomic
from ds4_converge.core.lock import LockHeld, RunLock

WATCHDOG = "ds4c.watchdog"  # a name server.name cannot take (it allows no '.')
RESTART_GRACE_S = 5  # an engine that does not answer has nothing to drain (service.switch.UNPROVEN_STOP_GRACE_S)
KEEP_INCIDENTS = 200
# BACKOFF is not here: supervisord is retrying a start itself (startretries); FATAL is when it gave up
NOT_ORDERED = ("EXITED", "FATAL")


def settings_path(layout: Layout) -> Path:
    return layout.run / "watch.json"


def incidents_path(layout: Layout) -> Path:
    return layout.logs / "incidents.jsonl"


@dataclass(frozen=True)
class Settings:
    name: str
    endpoint: str
    model: str
    interval_s: float
    completion_every_s: float  # 0: never
    failures: int
    backoff_max_s: float
    deadline_s: float  # a restarted engine's load: not answering then is no failure

    @classmethod
    def of(cls, spec, endpoint: str, model: str) -> Settings:
        w = spec.health.watchdog
        return cls(name=spec.server.name, endpoint=endpoint, model=model, interval_s=w.interval_s,
                   completion_every_s=w.completion_every_s, failures=w.failures, backoff_max_s=w.backoff_max_s,
                   deadline_s=spec.health.deadline_s)


def settings_text(settings: Settings) -> str:
    return json.dumps(asdict(settings)) + "\n"


def write_settings(layout: Layout, settings: Settings | None) -> None:
    """What the watchdog watches from now on (None: nothing, it idles)."""
    if settings is None:
        settings_path(layout).unlink(missing_ok=True)
    else:
        write_atomic(settings_path(layout), settings_text(settings), mode=0o600)


def read_settings(layout: Layout) -> Settings | None:
    try:
        return Settings(**json.loads(settings_path(layout).read_text()))
    except (OSError, ValueError, TypeError):
        return None


# --------------------------------------------------------------------------------- the decision, pure


@dataclass
class Tracker:
    failures: int = 0           # failed checks in a row
    restarts: int = 0           # restarts since the engine last passed a check
    not_before: float = 0.0     # no restart before this (back-off)
    loading_until: float = 0.0  # a restarted engine loads until then: not answering is no failure
    last_completion: float = field(default=-math.inf)

    def observe(self, settings: Settings, now: float, state: str, answered: bool | None, why: str) -> str | None:
        """One look at the engine; returns the cause of a restart due now, or None.

        state: supervisord's statename; answered: the check's result (None: not asked, e.g. not running)."""
        if state == "STOPPED":  # someone ordered the stop (supervisorctl, ds4-converge stop): not ours to undo
            self.failures = 0
            return None
        if state in NOT_ORDERED:
            cause = f"the engine {why}, and no stop was ordered"
        elif answered:
            self.failures, self.restarts = 0, 0
            return None
        elif answered is None or now < self.loading_until:
            return None
        else:
            self.failures += 1
            if self.failures < settings.failures:
                return None
            cause = f"{self.failures} checks failed in a row, the last: {why}"
        return cause if now >= self.not_before else None

    def restarted(self, settings: Settings, now: float) -> float:
        """A restart was done at `now`: the next one waits longer. Returns that wait."""
        self.restarts += 1
        self.failures = 0
        delay = min(settings.interval_s * 2 ** self.restarts, settings.backoff_max_s)
        self.not_before = now + delay
        self.loading_until = now + settings.deadline_s
        return delay

    def completion_due(self, settings: Settings, now: float) -> bool:
        return bool(settings.completion_every_s) and now - self.last_completion >= settings.completion_every_s


# --------------------------------------------------------------------------------- checks and records


def check(settings: Settings, completion: bool) -> tuple[bool, str]:
    """(answered, why not): /v1/models lists the model; with `completion`, a one-token completion answers."""
    import http.client  # here: status and the fleet textfile read this module's records on the no-op path

    from ds4_converge.core.engine_http import request

    timeout = max(1.0, min(settings.interval_s, 30.0))
    try:
        status, body = request(settings.endpoint, "GET", "/v1/models", timeout=timeout)
        if status != 200:
            return False, f"/v1/models answered HTTP {status}"
        if settings.model not in body:
            return False, f"/v1/models does not list {settings.model}"
        if completion:
            payload = {"model": settings.model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1,
                       "temperature": 0, "thinking": {"type": "disabled"}}
            status = request(settings.endpoint, "POST", "/v1/chat/completions", timeout=max(timeout, 60.0),
                             body=payload)[0]
            if status != 200:
                return False, f"a one-token completion answered HTTP {status}"
    except TimeoutError:
        return False, f"no answer within {timeout:.0f}s (hung?)"
    except (OSError, http.client.HTTPException) as exc:
        return False, f"{type(exc).__name__}: {exc}"
    return True, ""


def record(layout: Layout, incident: dict) -> None:
    """One line per incident, the newest KEEP_INCIDENTS kept."""
    path = incidents_path(layout)
    try:
        lines = path.read_text().splitlines()[-(KEEP_INCIDENTS - 1):]
    except OSError:
        lines = []
    lines.append(json.dumps(incident))
    write_atomic(path, "\n".join(lines) + "\n")


def incidents(layout: Layout) -> list[dict]:
    try:
        lines = incidents_path(layout).read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            out.append(item)
    return out


def summary(layout: Layout) -> dict:
    """For status and the fleet textfile: how many incidents, the last one and the last restart."""
    seen = incidents(layout)
    restarts = [i for i in seen if i.get("action") == "restarted"]
    return {"incidents": len(seen), "last_incident": seen[-1] if seen else None,
            "last_restart": restarts[-1] if restarts else None}


# --------------------------------------------------------------------------------- the loop


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _log(message: str) -> None:
    print(f"{_now_iso()} {message}", flush=True)


def _exit_words(info: dict) -> str:
    state = info["statename"]
    if state == "EXITED":
        return f"exited (exit status {info.get('exitstatus')})"
    return f"is {state} ({info.get('spawnerr') or info.get('description') or 'supervisord gave up starting it'})"


def last_spawned(layout: Layout, name: str) -> int | None:
    """The PID supervisord's log last says it spawned `name` with ("spawned: 'ds4' with pid 1234")."""
    import re

    try:
        with open(layout.supervisord_log, "rb") as handle:
            handle.seek(0, 2)
            handle.seek(max(0, handle.tell() - 65536))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return None
    found = re.findall(rf"spawned: '{re.escape(name)}' with pid (\d+)", text)
    return int(found[-1]) if found else None


def restart(layout: Layout, settings: Settings, supervisor, cause: str, last_pid: int | None = None) -> dict | None:
    """Restart under the run lock; None when a run owns the box now (the lock is held, a switch is in flight)."""
    from ds4_converge.service import guard

    lock = RunLock(layout.lock_file)
    try:
        lock.acquire()
    except LockHeld:
        return None
    with lock:
        if guard.read_intent(layout) is not None:
            return None
        before = supervisor.info(settings.name) or {}
        # an exited engine has no PID in supervisord any more: the one last seen running, or last spawned
        incident = {"at": _now_iso(), "name": settings.name, "cause": cause,
                    "pid": before.get("pid") or last_pid or last_spawned(layout, settings.name)}
        try:
            supervisor.stop(settings.name, grace=RESTART_GRACE_S)
            supervisor.load(settings.name)
            after = supervisor.info(settings.name) or {}
            incident.update(action="restarted", new_pid=after.get("pid") or None)
        except Exception as exc:  # noqa: BLE001 - recorded; the next look tries again after its back-off
            incident.update(action="restart failed", error=f"{type(exc).__name__}: {exc}")
        record(layout, incident)
        return incident


def watch(layout: Layout, *, clock=time.monotonic, sleep=time.sleep) -> None:
    from ds4_converge.service.supervisor import Supervisor

    supervisor, tracker, watched, last_pid = Supervisor(layout), Tracker(), None, None
    parent = os.getppid()
    while True:
        if os.getppid() != parent:  # supervisord was killed: with nothing to restart through, a watchdog is a
            return                  # leak (and its log was supervisord's pipe: nothing to say it on)
        settings = read_settings(layout)
        if settings != watched:  # a converge committed another engine (or stop removed it): start afresh
            # the engine was just proven: its first completion is due one completion_every_s from now
            tracker, watched = Tracker(last_completion=clock()), settings
        if settings is None:
            sleep(1.0)
            continue
        now = clock()
        info = supervisor.info(settings.name) if supervisor.is_running(settle=1) else None
        state = info["statename"] if info else "UNKNOWN"
        last_pid = info["pid"] if info and info["pid"] else last_pid
        answered, why = None, ""
        if state in ("RUNNING", "STARTING"):
            completion = tracker.completion_due(settings, now) and now >= tracker.loading_until
            answered, why = check(settings, completion)
            if completion and answered:
                tracker.last_completion = now
        elif info is not None and state in NOT_ORDERED:
            why = _exit_words(info)
        cause = tracker.observe(settings, now, state, answered, why) if info is not None else None
        if cause:
            incident = restart(layout, settings, supervisor, cause, last_pid)
            if incident is None:
                _log(f"{cause}; a converge run owns the box now: not restarting")
            else:
                delay = tracker.restarted(settings, clock())
                _log(f"{cause}: {incident['action']} (pid {incident['pid']} -> {incident.get('new_pid')}); "
                     f"the next restart waits at least {delay:.0f}s")
        sleep(settings.interval_s)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m ds4_converge.service.watchdog ROOT\n")
        return 2
    layout = Layout(Path(argv[0]))
    _log(f"watching what {settings_path(layout)} names")
    watch(layout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
