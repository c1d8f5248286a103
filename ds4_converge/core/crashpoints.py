"""Test hook: `DS4C_CRASH_AT=<name>` ends the run with SIGKILL at that step boundary, as a power cut or the OOM
killer would. The crash-consistency tests kill a run at every name below and show that a plain re-run ends
converged and healthy (or reverted to last good), and that something serves in between.

Unset (always, outside tests) it costs one dictionary lookup per boundary.
"""
from __future__ import annotations

import os
import signal

ENV = "DS4C_CRASH_AT"

POINTS = {
    "started": "the run holds the lock; nothing changed yet",
    "model-partial": "a model file is fully written to <dest>.partial, not yet verified and renamed",
    "models-placed": "every model file is in place, before the engine is resolved and built",
    "build-exported": "the release tree is exported to releases/.<id>.partial, before make",
    "build-made": "make built ds4-server and it answered --help, before the tree is renamed into place",
    "release-built": "the release is in place under releases/, before the service role",
    "supervisord-conf": "supervisord.conf is written, before supervisord is started or the engine switched",
    "intent": "the switch is recorded in run/switch.json and the guard is armed, before the old engine stops",
    "old-stopped": "the old engine is stopped (its whole process group), before the new program is written",
    "program-written": "the new program file and state.current are written, before supervisord loads them",
    "new-started": "supervisord has started the new engine, before the probe",
    "probed": "the new engine passed the whole probe (soak included), before it is recorded as last good",
    "blessed": "the new deployment is recorded as last good, before old releases are pruned",
    "held-flipped": "the held road (front.flip after-smoke): the new engine answered its smoke and the front door "
                    "sends clients to it, before its soak",
    "beside-intent": "a front door's overlap switch is recorded (its candidate named), before the candidate starts",
    "beside-started": "the candidate runs beside last good on the idle slot, before the probe talks to it",
    "beside-flipped": "the candidate passed the probe and the front door sends clients to it, before last good "
                      "is drained and stopped",
    "beside-old-stopped": "last good is stopped (the candidate serves), before the new program under server.name is "
                          "written",
    "beside-program-written": "the new program under server.name and state.current are written, before supervisord "
                              "starts it (the candidate serves)",
    "revert-intent": "a failed switch: the revert is recorded, before the failed engine stops",
    "revert-old-stopped": "the failed engine is stopped, before last good's program is written",
    "revert-program-written": "last good's program is written, before supervisord starts it",
    "rollback-intent": "`rollback`: the switch is recorded, before the engine that runs is stopped",
    "rollback-old-stopped": "`rollback`: the engine is stopped, before the rollback target's program is written",
    "rollback-program-written": "`rollback`: the target's program is written, before supervisord starts it",
}


def crash_point(name: str) -> None:
    if os.environ.get(ENV) == name:  # names are checked against POINTS by tests/robustness/test_crash_points.py
        os.kill(os.getpid(), signal.SIGKILL)
