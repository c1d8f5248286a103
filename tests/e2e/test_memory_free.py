"""Memory by what is really free, with real supervisord, the simulated engine and real memory held on this box.

- Another program holds memory: the plan judges what is free now (MemAvailable) and refuses, with the numbers,
  before anything changes; the box serves nothing it cannot hold.
- The old engine's memory comes back late (the simulator holds it in a child that outlives the engine by a few
  seconds, as a GB10's driver frees a device cache late): the switch waits, says so with the numbers, and starts
  the new engine only once that memory is back.

Each test sizes the context from what MemAvailable says at that moment, so the numbers fall in the middle of a
window some GiB wide whatever the machine's size: the engine's KV arithmetic (engine knowledge) turns a byte count
into a ctx. The memory really is held (touched pages), so these tests cost a few GiB for some seconds."""
import mmap
import re
import multiprocessing
import time
from pathlib import Path

import pytest

from ds4_converge.facts.memory import parse_meminfo
from ds4_converge.models.budget import FREE_RESERVE_BYTES, OS_HEADROOM_BYTES, estimate
from ds4_converge.units import GIB

pytestmark = pytest.mark.slow

HELD = 8 * GIB        # what the other program, or the old engine, holds
RETURN_S = 4.0        # how long after the old engine is gone its memory is back


def _meminfo():
    with open("/proc/meminfo") as text:
        return parse_meminfo(text.read())


def _ctx_for_peak(peak: int, weights: int) -> int:
    """The ctx whose budget (weights + KV) is `peak` bytes, by the budget's own arithmetic."""
    per_token = estimate(weights, 2).kv - estimate(weights, 1).kv
    ctx = max((peak - estimate(weights, 1).total) // per_token, 1)
    assert abs(estimate(weights, ctx).peak - peak) < GIB
    return ctx


def _hold(nbytes: int, ready, done) -> None:
    held = mmap.mmap(-1, nbytes)
    chunk = b"\1" * (1 << 24)
    for offset in range(0, nbytes, len(chunk)):
        held.write(chunk[:nbytes - offset])
    ready.set()
    done.wait(120)


@pytest.fixture
def other_program():
    """A program that is not ours holding HELD bytes of touched memory while the test runs."""
    ready, done = multiprocessing.Event(), multiprocessing.Event()
    holder = multiprocessing.get_context("fork").Process(target=_hold, args=(HELD, ready, done), daemon=True)
    holder.start()
    assert ready.wait(60), "the holder did not take its memory"
    yield holder
    done.set()
    holder.join(10)


def test_memory_another_program_holds_refuses_the_start_with_numbers(box, other_program):
    weights = _model_bytes(box)
    memory = _meminfo()
    free = memory.available_bytes - FREE_RESERVE_BYTES
    peak = free + 2 * GIB  # 2 GiB more than is free now, and within what the host could hold were it free
    assert peak <= memory.total_bytes - OS_HEADROOM_BYTES - GIB, (memory, "the window needs the held memory")
    rc, document = box.converge("--set", f"server.ctx={_ctx_for_peak(peak, weights)}")
    assert rc == 1, document
    error = document["error"]
    assert "does not fit in what is free now" in error and "MemAvailable" in error and "short by" in error, error
    assert "Other programs hold the rest" in error
    assert not (box.root / "releases").exists()  # nothing was built, started or written
    assert box.status()["pid"] is None


def test_the_switch_waits_until_the_old_engines_memory_is_back_then_starts_the_new_one(box):
    box.spec["server"]["env"].update(DS4_SIM_HOLD_GIB=str(HELD / GIB), DS4_SIM_RETURN_SECONDS=str(RETURN_S),
                                     DS4_SIM_LOAD_SECONDS="0.3")
    box.write()
    rc, document = box.converge()
    assert rc == 0, document
    old_pid = box.status()["pid"]
    time.sleep(1)
    # what is free while the old engine holds its memory: the new engine needs 2 GiB more than that (and its
    # reserve), which only the old engine's memory gives back
    running = _meminfo()
    needed = running.available_bytes + 2 * GIB
    peak = needed - FREE_RESERVE_BYTES
    assert peak <= running.total_bytes - OS_HEADROOM_BYTES - GIB, running

    started = time.monotonic()
    process = box.cli(str(box.spec_path), "--set", f"server.ctx={_ctx_for_peak(peak, _model_bytes(box))}")
    took = time.monotonic() - started
    said = process.stdout + process.stderr
    assert process.returncode == 0, said
    assert "waiting up to" in said and "for the old engine's memory to come back" in said, said
    assert "available" in said and "needed" in said
    new_pid = box.status()["pid"]
    assert new_pid not in (None, old_pid)
    assert took >= RETURN_S, took
    # the new engine started only once the old engine's memory was back, a few seconds after it was gone
    (back_after,) = re.findall(r"the old engine's memory is back after ([\d.]+)s", said)
    assert float(back_after) >= RETURN_S / 2, said


def _model_bytes(box) -> int:
    return Path(box.spec["model"]["main"]).stat().st_size
