"""The PID named when a run is refused (exit 3) is the process that really holds the lock: read from the
kernel, never an empty file or a dead earlier holder's PID."""
import subprocess
import sys
import time

import pytest

from ds4_converge.core.lock import LockHeld, RunLock

# real processes racing for the lock, many rounds: an end-to-end test
pytestmark = pytest.mark.slow

CONTENDER = """
import sys, time
from ds4_converge.core.lock import LockHeld, RunLock
path, start = sys.argv[1], float(sys.argv[2])
while time.time() < start:
    pass
try:
    with RunLock(__import__("pathlib").Path(path)).acquire():
        print("holder", flush=True)
        time.sleep(1.0)
except LockHeld as exc:
    print("refused", exc, flush=True)
"""


def test_simultaneous_runs_name_the_real_holder(tmp_path):
    wrong = []
    for attempt in range(15):
        path = tmp_path / f"converge-{attempt}.lock"
        if attempt % 2:
            path.write_text("999999\n")  # a dead earlier holder's PID left in the file
        start = time.time() + 0.6
        procs = [subprocess.Popen([sys.executable, "-c", CONTENDER, str(path), str(start)],
                                  stdout=subprocess.PIPE, text=True) for _ in range(2)]
        outs = {p.pid: p.communicate(timeout=30)[0].strip() for p in procs}
        holders = [pid for pid, out in outs.items() if out == "holder"]
        refused = [out for out in outs.values() if out.startswith("refused")]
        if len(holders) != 1:
            continue  # not simultaneous after all (one finished before the other started)
        assert len(refused) == 1
        if f"(pid {holders[0]})" not in refused[0]:
            wrong.append(refused[0])
    assert not wrong, wrong


def test_a_read_only_holder_is_named_too(tmp_path):
    path = tmp_path / "converge.lock"
    path.write_text("")
    with RunLock(path, read_only=True).acquire():
        try:
            RunLock(path).acquire()
        except LockHeld as exc:
            assert str(exc).endswith(f"(pid {__import__('os').getpid()})")
        else:
            raise AssertionError("a writer must be refused while a check holds the lock")
