"""The watchdog between runs: an engine that stops answering, or exits when nobody asked it to, is restarted.

Nothing else watches a converged box until someone converges again: an engine sent SIGTERM from outside drains
and exits 0, a hung one (SIGSTOP, a wedged driver) keeps its PID and answers nothing. The watchdog is a program
of supervisord's own, like the switch guard (`[program:ds4c.watchdog]` in supervisord.conf, `python -m
ds4_converge.service.watchdog ROOT`), so it runs whatever ends a run and starts again at boot. Like Nomad's
check_restart:

- every health.watchdog.interval_s it asks /v1/models, and every completion_every_s a one-token completion, but
  only at an idle moment: never queued behind a client's request (upstream ds4-server has one worker thread);
- busy is not hung: a check that does not answer in time, or requests in flight, are judged by the engine's
  progress (service/busy.py: CPU time, its log, bytes to clients). Progress with work in flight is busy, no
  failure; no progress for `failures` looks in a row is hung. A completion answering 5xx (or the front door
  counting only 5xx from the serving slot) is a failure, busy or not: a poisoned engine is restarted; a 503
  with Retry-After (the fork's admission control) is busy;
- after `failures` failed checks in a row, or at once when supervisord shows the engine EXITED or FATAL (no
  stop was ordered: an ordered stop leaves it STOPPED), it restarts the engine: a short grace then SIGKILL for
  one that does not answer; then, as a switch does, it waits (bounded) for the memory the engine needs to be
  back (service/memory_back.py) and supervisord starts it again exactly as its program file says. Memory that
  does not come back: the engine is not started, and the next look tries again after the back-off;
- restarts back off (interval_s x 2^n, at most backoff_max_s) until a check passes again; a restarted engine
  that does not answer yet is loading, until its first passed check (or health.deadline_s), and a check it
  fails then counts only when its load makes no progress: never blind after a restart;
- never while a converge holds the run lock, or a switch is in flight (the guard's intent): a run owns the box;
- each incident is one JSON line in ROOT/logs/incidents.jsonl (when, the cause, which check failed with its
  own timeout, the signal and whether the kernel's OOM killer sent it, what it did, the PIDs), which `status`,
  `--json` and the fleet textfile show.

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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ds4_converge.core import bounded_file
from ds4_converge.core.layout import Layout, write_atomic
from ds4_converge.core.lock import LockHeld, RunLock
from ds4_converge.service import busy, exits, resident

if TYPE_CHECKING:
    from ds4_converge.service.snapshot import Snapshot

WATCHDOG = "ds4c.watchdog"  # a name server.name cannot take (it allows no '.')
RESTART_GRACE_S = 5  # an engine that does not answer has nothing to drain (service.switch.UNPROVEN_STOP_GRACE_S)
KEEP_INCIDENTS = 200
# BACKOFF is not here: supervisord is retrying a start itself (startretries); FATAL is when it gave up
NOT_ORDERED = ("EXITED", "FATAL")
MODELS = "/v1/models"
COMPLETION = "a one-token completion"
COMPLETION_TIMEOUT_S = 60.0
BUSY_SAY_EVERY_S = 60.0  # a long busy stretch is said when it begins, then once a minute


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
    deadline_s: float  # a restarted engine's load, at most: not answering then is no failure
    memory_needed: int | None = None  # MemAvailable a restart waits for (the switch's: budget peak + reserve)
    memory_back_s: float = 60.0       # how long it waits for it (the switch's bound)

    @classmethod
    def of(cls, spec, endpoint: str, model: str, memory_needed: int | None = None,
           memory_back_s: float = 60.0) -> Settings:
        w = spec.health.watchdog
        return cls(name=spec.server.name, endpoint=endpoint, model=model, interval_s=w.interval_s,
                   completion_every_s=w.completion_every_s, failures=w.failures, backoff_max_s=w.backoff_max_s,
                   deadline_s=spec.health.deadline_s, memory_needed=memory_needed, memory_back_s=memory_back_s)

    @property
    def port(self) -> int | None:
        """The engine's own port: what the watchdog asks, and its slot at the front door."""
        from urllib.parse import urlsplit

        return urlsplit(self.endpoint).port

    @property
    def models_timeout_s(self) -> float:
        return max(1.0, min(self.interval_s, 30.0))


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
        return Settings(**bounded_file.read_json(settings_path(layout)))
    except (OSError, ValueError, TypeError):
        return None


# --------------------------------------------------------------------------------- the decision, pure


@dataclass(frozen=True)
class Finding:
    """What one look found. outcome: "passed", "busy" (at work and progressing: no failure), "failed", or
    "unasked" (nothing asked: not running, loading). check: which check failed, with its own timeout."""
    outcome: str
    why: str = ""
    check: str = ""
    timeout_s: float | None = None

    def fields(self) -> dict:
        """For an incident: the check that failed and its timeout."""
        return {k: v for k, v in (("check", self.check), ("timeout_s", self.timeout_s)) if v}


PASSED, UNASKED = Finding("passed"), Finding("unasked")


@dataclass
class Tracker:
    failures: int = 0           # failed checks in a row
    restarts: int = 0           # restarts since the engine last passed a check
    not_before: float = 0.0     # no restart before this (back-off)
    loading_until: float = 0.0  # a restarted engine loads until its first passed check, at most until then:
                                # a check it fails meanwhile counts only when the load does not progress
    last_completion: float = field(default=-math.inf)
    start_owed: bool = False    # the last restart stopped the engine but found the memory short: start it again
    last_failure: Finding | None = None

    def loading(self, now: float) -> bool:
        return now < self.loading_until

    def observe(self, settings: Settings, now: float, state: str, finding: Finding,
                exit_words: str = "") -> str | None:
        """One look at the engine; returns the cause of a restart due now, or None.

        state: supervisord's statename; exit_words: how it exited (EXITED, FATAL)."""
        if self.start_owed and state in ("STOPPED",) + NOT_ORDERED:
            cause = "the last restart found the memory short and did not start the engine"
        elif state == "STOPPED":  # someone ordered the stop (supervisorctl, ds4-converge stop): not ours to undo
            self.failures = 0
            return None
        elif state in NOT_ORDERED:
            cause = f"the engine {exit_words}, and no stop was ordered"
        elif finding.outcome == "passed":
            self.failures, self.restarts, self.loading_until = 0, 0, 0.0  # loaded: a hang is seen from now on
            return None
        elif finding.outcome == "busy":
            self.failures = 0
            return None
        elif finding.outcome == "unasked":
            return None
        else:
            self.failures += 1
            self.last_failure = finding
            if self.failures < settings.failures:
                return None
            cause = f"{self.failures} checks failed in a row, the last: {finding.why}"
        return cause if now >= self.not_before else None

    def restarted(self, settings: Settings, now: float, *, started: bool = True) -> float:
        """A restart was done at `now` (started: False when the memory was short): the next one waits longer.
        Returns that wait."""
        self.restarts += 1
        self.failures, self.last_failure = 0, None
        self.start_owed = not started
        delay = min(settings.interval_s * 2 ** self.restarts, settings.backoff_max_s)
        self.not_before = now + delay
        self.loading_until = now + settings.deadline_s
        return delay

    def left_to_a_run(self) -> None:
        """A restart was due while a run owned the box (its lock, a switch in flight): what failed meanwhile was
        that run's switch, not this engine's health. The count starts again after it; a stale count would restart
        the engine the run just proved at the first look after it."""
        self.failures, self.last_failure = 0, None

    def completion_due(self, settings: Settings, now: float) -> bool:
        return bool(settings.completion_every_s) and now - self.last_completion >= settings.completion_every_s


def while_loading(finding: Finding, judgement: busy.Judgement) -> Finding:
    """A check that failed while a restarted engine loads: no failure while the load progresses (CPU time, its
    log), a failure when nothing moves (an engine hung as it loads is seen as fast as one hung later)."""
    if judgement.progressed or not judgement.known:
        return UNASKED
    return Finding("failed", f"{finding.why}; loading, and {judgement.words.split(', and ', 1)[-1]}",
                   finding.check, finding.timeout_s)


def judged(finding: Finding, judgement: busy.Judgement) -> Finding:
    """A check that did not answer in time, judged by what the engine did meanwhile: busy when it progressed
    with work in flight, else the failure it was."""
    if judgement.busy:
        return Finding("busy", f"busy: {judgement.words}")
    if not judgement.known and judgement.in_flight:  # the first look: the next one tells busy from hung
        return UNASKED
    return Finding("failed", f"{finding.why}; {judgement.words}", finding.check, finding.timeout_s)


# --------------------------------------------------------------------------------- checks and records


@dataclass(frozen=True)
class Answer:
    """One check's answer: passed, refused as busy (503 with Retry-After), timed out, or failed with words."""
    passed: bool = False
    busy_refusal: bool = False
    timed_out: bool = False
    why: str = ""


def _ask(settings: Settings, method: str, path: str, timeout: float, body: dict | None = None) -> Answer:
    import http.client  # here: status and the fleet textfile read this module's records on the no-op path
    from urllib.parse import urlsplit

    url = urlsplit(settings.endpoint)
    connection = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=timeout)
    try:
        payload = json.dumps(body).encode() if body is not None else None
        connection.request(method, path, body=payload,
                           headers={"Content-Type": "application/json"} if payload else {})
        response = connection.getresponse()
        text = response.read().decode("utf-8", "replace")
    except TimeoutError:
        return Answer(timed_out=True, why=f"{path} did not answer within {timeout:.0f}s")
    except (OSError, http.client.HTTPException) as exc:
        return Answer(why=f"{path}: {type(exc).__name__}: {exc}")
    finally:
        connection.close()
    if response.status == 503 and response.getheader("Retry-After"):
        return Answer(busy_refusal=True,
                      why=f"{path} answered HTTP 503, Retry-After {response.getheader('Retry-After')}")
    if response.status != 200:
        return Answer(why=f"{path} answered HTTP {response.status}")
    if path == "/v1/models" and settings.model not in text:
        return Answer(why=f"/v1/models does not list {settings.model}")
    return Answer(passed=True)


def check_models(settings: Settings) -> Answer:
    return _ask(settings, "GET", "/v1/models", settings.models_timeout_s)


def check_completion(settings: Settings) -> Answer:
    payload = {"model": settings.model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1,
               "temperature": 0, "thinking": {"type": "disabled"}}
    answer = _ask(settings, "POST", "/v1/chat/completions", COMPLETION_TIMEOUT_S, payload)
    return replace(answer, why=answer.why.replace("/v1/chat/completions", COMPLETION, 1))


def record(layout: Layout, incident: dict) -> None:
    """One line per incident, the newest KEEP_INCIDENTS kept."""
    path = incidents_path(layout)
    try:
        lines = _incident_lines(layout)[-(KEEP_INCIDENTS - 1):]
    except OSError:
        lines = []
    lines.append(json.dumps(incident))
    write_atomic(path, "\n".join(lines) + "\n")


def _incident_lines(layout: Layout) -> list[str]:
    """The incident log's lines (the tool writes at most KEEP_INCIDENTS short ones: read bounded, never a FIFO)."""
    return bounded_file.read(incidents_path(layout), bounded_file.MAX_RECORD_BYTES, "the incident log").decode(
        "utf-8", "replace").splitlines()


def incidents(layout: Layout) -> list[dict]:
    try:
        lines = _incident_lines(layout)
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            item = bounded_file.load_json(line)
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


def incident_words(incident: dict) -> str:
    """One line for status: the cause, and what the record adds (the signal, the OOM killer, the memory)."""
    extra = []
    if incident.get("signal"):
        extra.append(f"{incident['signal']}, OOM killer: {incident.get('oom_killer', 'unknown')}")
    if incident.get("memory"):
        extra.append(incident["memory"])
    return incident.get("cause", "") + (f" ({'; '.join(extra)})" if extra else "")


# --------------------------------------------------------------------------------- what serves, read once a look


def serving(layout: Layout, settings: Settings, supervisor) -> Snapshot:
    """What serves under this root, as one look reads it (service/snapshot.py: supervisord, the front door)."""
    from ds4_converge.service import snapshot  # here: status and the fleet textfile import this module lean

    return snapshot.read_named(layout, supervisor, settings.name, settle=1)


def engine_state(now: Snapshot) -> str:
    """supervisord's statename of the watched engine ("UNKNOWN": supervisord does not answer or knows no such
    program)."""
    return now.engine.state or "UNKNOWN"


# --------------------------------------------------------------------------------- the loop


_now_iso, _log = resident.now_iso, resident.log


def exit_record(layout: Layout, info: dict, pid: int | None) -> dict:
    """How the engine exited: the exit status, or the signal's name from supervisord's log (its XML-RPC says
    -1), and for SIGKILL whether the kernel's OOM killer sent it ("unknown" where its log is not readable)."""
    found = exits.parse_exit(exits.tail(layout.supervisord_log) or "", info.get("name") or "")
    if info.get("statename") == "EXITED" and not found:
        found = {"exit_status": info.get("exitstatus")}
    if found.get("signal") == "SIGKILL":
        found["oom_killer"] = exits.oom_words(pid, exits.kernel_log())
    return found


def _exit_words(info: dict, record: dict) -> str:
    state = info["statename"]
    if state == "EXITED":
        if record.get("signal"):
            return f"was killed by {record['signal']}" + (" (the kernel's OOM killer)"
                                                          if record.get("oom_killer") == "yes" else "")
        return f"exited (exit status {record.get('exit_status', info.get('exitstatus'))})"
    return f"is {state} ({info.get('spawnerr') or info.get('description') or 'supervisord gave up starting it'})"


def last_spawned(layout: Layout, name: str) -> int | None:
    """The PID supervisord's log last says it spawned `name` with ("spawned: 'ds4' with pid 1234")."""
    import re

    found = re.findall(rf"spawned: '{re.escape(name)}' with pid (\d+)", exits.tail(layout.supervisord_log) or "")
    return int(found[-1]) if found else None


def restart(layout: Layout, settings: Settings, supervisor, cause: str, last_pid: int | None = None,
            details: dict | None = None) -> dict | None:
    """Restart under the run lock; None when a run owns the box now (the lock is held, a switch is in flight) or
    owned it since the look (watch.json changed: the engine judged is not the one that serves).
    Between the stop and the start, the memory the engine needs must be back (as a switch waits for it):
    otherwise the engine stays stopped and the incident says so ("not restarted")."""
    from ds4_converge.core.plan import RoleFailed
    from ds4_converge.service import guard, memory_back

    lock = RunLock(layout.lock_file)
    try:
        lock.acquire()
    except LockHeld:
        return None
    with lock:
        if guard.read_intent(layout) is not None:
            return None
        if read_settings(layout) != settings:  # a run committed another engine since this look: judged stale
            return None
        before = supervisor.info(settings.name) or {}
        # an exited engine has no PID in supervisord any more: the one last seen running, or last spawned
        incident = {"at": _now_iso(), "name": settings.name, "cause": cause, **(details or {}),
                    "pid": before.get("pid") or last_pid or last_spawned(layout, settings.name)}
        said: list[str] = []
        try:
            supervisor.stop(settings.name, grace=RESTART_GRACE_S)
            if settings.memory_needed:
                memory_back.wait_until_back(settings.memory_needed, bound_s=settings.memory_back_s,
                                            say=said.append)
            supervisor.load(settings.name)
            after = supervisor.info(settings.name) or {}
            incident.update(action="restarted", new_pid=after.get("pid") or None)
        except RoleFailed as exc:  # the memory did not come back: not started; the next look tries again
            said.append(str(exc))
            incident.update(action="not restarted")
        except Exception as exc:  # noqa: BLE001 - recorded; the next look tries again after its back-off
            incident.update(action="restart failed", error=f"{type(exc).__name__}: {exc}")
        if said:
            incident["memory"] = "; ".join(said)
        record(layout, incident)
        return incident


class Watch:
    """The watchdog's loop state: the settings it watches, the tracker, the last progress sample."""

    def __init__(self, layout: Layout, supervisor, clock=time.monotonic):
        self.layout, self.supervisor, self.clock = layout, supervisor, clock
        self.settings: Settings | None = None
        self.tracker = Tracker()
        self.last_pid: int | None = None
        self.sample: busy.Sample | None = None
        self.busy_said = -math.inf

    def reset(self, settings: Settings | None) -> None:
        # the engine was just proven: its first completion is due one completion_every_s from now
        self.settings, self.tracker, self.sample = settings, Tracker(last_completion=self.clock()), None

    def progress(self, now: Snapshot) -> busy.Judgement:
        """What the engine did since the last sample (requests in flight, progress)."""
        port, log = self.settings.port, now.engine.log
        after = busy.sample(self.clock(), now.engine.pid, port, Path(log) if log else None,
                            self.front_stat(now.slot_of(port)))
        judgement = busy.judge(self.sample, after)
        self.sample = after
        return judgement

    def front_stat(self, slot: str | None):
        """A reader of the front door's counters for the engine's slot (None: no front door in front of it)."""
        if slot is None:
            return None
        from ds4_converge.service import haproxy

        name = self.settings.name
        return lambda: busy.parse_front_stat(haproxy.admin(self.layout, "show stat"), f"{name}-engine", slot)

    def look(self, now: Snapshot, at: float) -> Finding:
        """Ask the engine, and judge what did not answer by its progress."""
        settings, tracker = self.settings, self.tracker
        judgement = self.progress(now)  # before asking: our own check is not a request in flight
        models = check_models(settings)
        if models.busy_refusal:
            return Finding("busy", f"busy: {models.why}")
        if not models.passed and tracker.loading(at):
            return while_loading(Finding("failed", models.why, MODELS, settings.models_timeout_s), judgement)
        if models.timed_out:
            return judged(Finding("failed", models.why, MODELS, settings.models_timeout_s), judgement)
        if not models.passed:
            return Finding("failed", models.why, MODELS, settings.models_timeout_s)
        if judgement.poisoned:
            return Finding("failed", f"the front door counted only errors from the engine: {judgement.words}",
                           "front door")
        if judgement.in_flight:  # at work: no check queued behind it; no progress at all is a wedged worker
            return judged(Finding("failed", "/v1/models answers but the work in flight does not move", "progress"),
                          judgement)
        if not tracker.completion_due(settings, at):
            return PASSED
        completion = check_completion(settings)
        if completion.passed:
            tracker.last_completion = at
            return PASSED
        failed = Finding("failed", completion.why, COMPLETION, COMPLETION_TIMEOUT_S)
        if completion.busy_refusal:
            return Finding("busy", f"busy: {completion.why}")
        if completion.timed_out:
            finding = judged(failed, self.progress(now))
            if finding.outcome == "busy":
                tracker.last_completion = at  # not another one queued behind the work: the next at an idle moment
            return finding
        return failed  # an answer that is an error: a poisoned engine, busy or not

    def say_busy(self, finding: Finding, at: float) -> None:
        if finding.outcome != "busy":
            self.busy_said = -math.inf
        elif at - self.busy_said >= BUSY_SAY_EVERY_S:
            self.busy_said = at
            _log(f"{finding.why}: no failure; the completion check waits for an idle moment")

    def once(self) -> None:
        settings = read_settings(self.layout)
        if settings != self.settings:  # a converge committed another engine (or stop removed it): start afresh
            self.reset(settings)
        if settings is None:
            return
        at = self.clock()
        now = serving(self.layout, settings, self.supervisor)
        state, info = engine_state(now), now.engine.info
        self.last_pid = (info or {}).get("pid") or self.last_pid
        finding, details, exit_words = UNASKED, {}, ""
        if state in ("RUNNING", "STARTING"):
            finding = self.look(now, at)
            self.say_busy(finding, at)
        elif info is not None and state in NOT_ORDERED:
            details = exit_record(self.layout, dict(info), self.last_pid) if state == "EXITED" else {}
            exit_words = _exit_words(info, details)
            details["check"] = "exit"
        cause = self.tracker.observe(settings, at, state, finding, exit_words) if info is not None else None
        if not cause:
            return
        if not details and self.tracker.last_failure is not None:
            details = self.tracker.last_failure.fields()
        incident = restart(self.layout, settings, self.supervisor, cause, self.last_pid, details)
        if incident is None:
            self.tracker.left_to_a_run()
            _log(f"{cause}; a converge run owns the box now: not restarting")
            return
        delay = self.tracker.restarted(settings, self.clock(), started=incident["action"] != "not restarted")
        self.sample = None
        _log(f"{incident_words(incident)}: {incident['action']} (pid {incident['pid']} -> "
             f"{incident.get('new_pid')}); the next restart waits at least {delay:.0f}s")


def watch(layout: Layout, *, clock=time.monotonic, sleep=time.sleep) -> None:
    from ds4_converge.service.supervisor import Supervisor

    state = Watch(layout, Supervisor(layout), clock)
    parent = os.getppid()
    while True:
        if os.getppid() != parent:  # supervisord was killed: with nothing to restart through, a watchdog is a
            return                  # leak (and its log was supervisord's pipe: nothing to say it on)
        state.once()
        sleep(state.settings.interval_s if state.settings else 1.0)


def main(argv: list[str]) -> int:
    return resident.main(argv, "ds4_converge.service.watchdog", watch,
                         lambda layout: f"watching what {settings_path(layout)} names")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
