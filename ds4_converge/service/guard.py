"""The switch guard: when a run dies between stopping the old engine and proving the new one, last good comes
back on its own, without waiting for someone to run the tool again.

Before a switch stops anything, the run records its intent in ROOT/run/switch.json (its PID and start time, the
program name, last good) and makes sure the guard runs. The guard is a program of supervisord's own
(`[program:ds4c.switch-guard]` in supervisord.conf, `python -m ds4_converge.service.guard ROOT`), so it outlives
the run whatever ends it: SIGKILL, the OOM killer, a cgroup teardown by systemd or Ansible. The run removes the
intent once the new engine is last good or the revert is done.

The guard polls the intent file. While the run lives it does nothing. When the run is gone and its intent is
still there, the guard takes the run lock, puts last good back exactly as recorded (stored program file, no
re-render, no rebuild: what a revert does, without the probe) and removes the intent. supervisord starts the
guard at boot too, so a crash followed by a reboot is repaired the same way, and the next run repairs a stale
intent itself (under its lock, before planning) in case no guard could.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from ds4_converge.core.layout import Layout, write_atomic
from ds4_converge.core.lock import LockHeld, RunLock
from ds4_converge.core.state import Deployment, State, StateUnreadable
from ds4_converge.core import processes
from ds4_converge.service import resident, secrets
from ds4_converge.service.supervisor import Supervisor, this_python
from ds4_converge.core import bounded_file

POLL_S = 0.25


def intent_path(layout: Layout) -> Path:
    return layout.run / "switch.json"


def arm(layout: Layout, supervisor: Supervisor | None, *, name: str, grace: float,
        fallback: Deployment | None, candidate: str | None = None, command: str = "converge") -> None:
    """Record the switch before anything stops; with a supervisor, make sure its guard watches. `candidate`: the
    program of a new engine started beside the serving one, which a restore stops; `command`: the run's (its
    outcome is recorded under that name should the guard have to restore)."""
    pid = os.getpid()
    intent = {"pid": pid, "start": processes.start_time(pid), "name": name, "grace": grace,
              "fallback": asdict(fallback) if fallback else None, "candidate": candidate, "command": command}
    write_atomic(intent_path(layout), json.dumps(intent) + "\n", mode=0o600)
    if supervisor is not None:
        supervisor.ensure_guard()


def disarm(layout: Layout) -> None:
    """The switch is settled (new engine proven, or reverted): nothing for the guard to do."""
    intent_path(layout).unlink(missing_ok=True)


def read_intent(layout: Layout) -> dict | None:
    try:
        intent = bounded_file.read_json(intent_path(layout))
        if isinstance(intent, dict) and isinstance(intent.get("pid"), int) and isinstance(intent.get("name"), str):
            return intent
    except (OSError, ValueError):
        pass
    return None if not intent_path(layout).exists() else {"pid": 0, "start": None, "name": None}


def run_alive(intent: dict) -> bool:
    """The run that recorded the intent still runs (same PID and start time: a reused PID is not it)."""
    pid = intent.get("pid") or 0
    return pid > 0 and intent.get("start") is not None and processes.start_time(pid) == intent["start"]


def restore(layout: Layout, intent: dict) -> str:
    """Put last good back as recorded. Last good is read from state.json now (the run may have recorded a new
    one just before it died), else taken from the intent."""
    name = intent.get("name")
    if not name:
        return "unreadable switch intent: nothing restored (the next run plans from what runs)"
    grace = float(intent.get("grace") or 60)
    try:
        state = State.load(layout.state_file)
    except StateUnreadable:
        state = None
    target = state.last_good if state and state.last_good else None
    if target is None and intent.get("fallback"):
        target = Deployment(**intent["fallback"])
    supervisor = Supervisor(layout)
    if not supervisor.is_running():
        _drop_candidate(layout, None, intent)  # supervisord would start it beside last good
        if target is not None:  # supervisord starts what the program file says: make it say last good
            secrets.write_program(layout, layout.program_conf(name), target.program_conf)
        return f"supervisord is not running; {layout.program_conf(name)} names last good for its next start"
    if target is None:
        supervisor.stop(name, grace=grace)
        if state is not None:
            state.current = None
            state.save(layout.state_file)
        return "no last good release (a first install): the unproven engine is stopped" + \
            _drop_candidate(layout, supervisor, intent)
    info = supervisor.info(name)
    try:
        on_disk = secrets.seal(layout.program_conf(name).read_text(), layout)
    except (OSError, ValueError):
        on_disk = None
    if on_disk == target.program_conf and info and info["statename"] in ("RUNNING", "STARTING"):
        said = f"last good {target.release} runs already"
    else:
        supervisor.stop(name, grace=grace)
        if state is not None:
            state.current = target
            state.save(layout.state_file)
        secrets.write_program(layout, layout.program_conf(name), target.program_conf)
        supervisor.load(name)
        said = f"restored last good {target.release}"
    from ds4_converge.service.front import serve_restored

    return said + serve_restored(layout, name, target) + _drop_candidate(layout, supervisor, intent)


def _drop_candidate(layout: Layout, supervisor: Supervisor | None, intent: dict) -> str:
    """A new engine the dead run started beside last good (the front door's overlap switch): stopped, removed.
    Only once the front door points at last good again, so no client is cut off by it."""
    program = intent.get("candidate")
    if not isinstance(program, str) or not program:
        return ""
    if supervisor is not None:
        supervisor.remove(program)
    layout.program_conf(program).unlink(missing_ok=True)
    return f"; the candidate {program} is stopped and removed"


def recover_stale(layout: Layout) -> str | None:
    """For the next run, under its lock: a switch whose run died and that no guard repaired."""
    intent = read_intent(layout)
    if intent is None or intent.get("pid") == os.getpid() or run_alive(intent):
        return None
    message = restore(layout, intent)
    disarm(layout)
    return f"an earlier run died during a switch: {message}"


def watch(layout: Layout) -> None:
    """The guard's loop: resident under supervisord, cheap (one stat per poll)."""
    while True:
        intent = read_intent(layout)
        if intent is None or run_alive(intent):
            time.sleep(POLL_S)
            continue
        lock = RunLock(layout.lock_file)
        try:
            lock.acquire()
        except LockHeld:  # a new run took over: it repairs the stale intent itself, under this lock
            time.sleep(POLL_S)
            continue
        with lock:
            intent = read_intent(layout)
            if intent is None or run_alive(intent):
                continue
            _log(f"run {intent.get('pid')} died during a switch of {intent.get('name')}")
            try:
                message = restore(layout, intent)
                _log(message)
            except Exception as exc:  # noqa: BLE001 - log, keep the intent: the next run tries again
                _log(f"restore failed: {type(exc).__name__}: {exc}; the next run repairs it")
                time.sleep(5)
                continue
            disarm(layout)
            record_outcome(layout, intent, message)


def record_outcome(layout: Layout, intent: dict, restored: str) -> None:
    """The restore is the outcome of the run that died: ROOT/logs/last-run.json says so (status, its --json's
    last_run: not ok, died during a switch, what the guard restored), and the fleet textfile is written again
    (ds4_converge_last_run_success 0 for that command). Best effort: a record that cannot be written is logged."""
    try:
        state = State.load(layout.state_file)
    except StateUnreadable:
        state = None
    serving = state.current.release if state and state.current else None
    command = intent.get("command") if isinstance(intent.get("command"), str) else "converge"
    record = {"command": command, "ok": False, "release": serving,
              "error": f"the run (pid {intent.get('pid')}) died during a switch of {intent.get('name')}; "
                       f"the switch guard: {restored}",
              "finished_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
              "died_during_switch": True, "guard_restored": restored}
    try:
        write_atomic(layout.last_run_file, json.dumps(record, indent=2) + "\n")
    except OSError as exc:
        _log(f"could not record the run's outcome in {layout.last_run_file}: {exc.strerror}")
        return
    # the textfile is the CLI's (cli/fleet_facts.py, a layer above this one): its own process writes it
    try:
        subprocess.run([this_python(), "-m", "ds4_converge.cli.fleet_facts", str(layout.root)],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=TEXTFILE_TIMEOUT_S, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        _log(f"could not write the fleet textfile: {exc}")


TEXTFILE_TIMEOUT_S = 60


_log = resident.log


def main(argv: list[str]) -> int:
    return resident.main(argv, "ds4_converge.service.guard", watch, lambda layout: f"watching {intent_path(layout)}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
