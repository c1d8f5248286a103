"""The probe as rungs over one clock (health/rungs.py): which rungs each engine climbs, in order, and how the one
loop asks them: a waiting rung again after the pause until the deadline, a one-shot rung once, a soak after each
pause until its clock runs out."""
import time

import pytest

import house
from ds4_converge.health import probe, worker
from ds4_converge.health.rungs import Clock, NotReady, Rung, Unhealthy, climb
from ds4_converge.spec.model import Address, Smoke

SMOKE = Smoke(prompt="What is the capital of France?", expect="Paris")
LISTEN = Address(host="127.0.0.1", port=9001)


def target(**given) -> probe.ProbeTarget:
    return probe.ProbeTarget(**{"endpoint": "http://127.0.0.1:1", "deadline_s": 1, "soak_s": 0, "interval_s": 1,
                                "smoke": None, **given})


@pytest.mark.parametrize("given, rungs", [
    ({}, ["models listed"]),
    ({"smoke": SMOKE}, ["models listed", "smoke", "streamed smoke"]),
    ({"smoke": SMOKE, "speculative": True}, ["models listed", "smoke", "streamed smoke", "speculation"]),
    ({"smoke": SMOKE, "tool_call": True}, ["models listed", "smoke", "streamed smoke", "tool call"]),
    ({"speculative": True}, ["models listed"]),  # speculation is the smoke again: no smoke, nothing to repeat
    ({"smoke": SMOKE, "coordinator": LISTEN}, ["models listed", "route"]),  # its smoke is the route's answer
    ({"coordinator": LISTEN, "tool_call": True}, ["models listed", "route", "tool call"]),
])
def test_each_http_engine_climbs_its_rungs_in_order(given, rungs):
    engine = probe.Engine(target(**given), watch=None, alive=None)
    assert [r.name for r in probe.ladder(engine)] == rungs
    assert [r.waits for r in probe.ladder(engine)] == [name in ("models listed", "route") for name in rungs]


def test_a_worker_climbs_up_or_connected():
    for connected, name in ((False, "up"), (True, "connected")):
        assert [r.name for r in worker.ladder(worker.Worker(None, str, LISTEN, connected))] == [name]


def asked(answers):
    """A check that answers from `answers` in turn (an exception is raised), counting its questions."""
    answers, calls = iter(answers), []

    def check(clock):
        calls.append(time.monotonic())
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
    return check, calls


def test_a_waiting_rung_is_asked_again_after_the_pause_until_it_passes():
    check, calls = asked([NotReady("loading"), NotReady("loading"), None])
    pauses = []
    clock = Clock(30, lambda why: pauses.append(str(why)) or 0.01)
    climb([Rung("models listed", check, waits=True)], clock)
    assert len(calls) == 3 and pauses == ["loading", "loading"]


def test_a_waiting_rung_late_at_the_deadline_gets_its_verdict_and_the_pause_never_passes_the_deadline():
    check, calls = asked([NotReady("loading")] * 1000)
    started = time.monotonic()
    with pytest.raises(Unhealthy, match=r"^not ready within 0s \(loading\)$"):
        climb([Rung("models listed", check, waits=True)], Clock(0.3, lambda why: 60))
    assert 0.3 <= time.monotonic() - started < 5  # not the minute's pause: the last question is at the deadline
    assert 1 <= len(calls) <= 2
    check, _ = asked([NotReady("layer 22")] * 1000)
    with pytest.raises(Unhealthy, match="never arrived: layer 22 after 0.1s"):
        climb([Rung("route", check, waits=True,
                    late=lambda exc, clock: Unhealthy(f"never arrived: {exc} after {clock.deadline_s}s"))],
              Clock(0.1, lambda why: 0.01))


def test_unhealthy_ends_the_climb_at_once_and_a_one_shot_rung_is_asked_once():
    check, calls = asked([Unhealthy("wrong model")])
    later, never = asked([None])
    with pytest.raises(Unhealthy, match="wrong model"):
        climb([Rung("models listed", check, waits=True), Rung("smoke", later)], Clock(30, lambda why: 0.01))
    assert len(calls) == 1 and never == []
    check, calls = asked([NotReady("route incomplete")])
    with pytest.raises(NotReady, match="route incomplete"):  # not waited for: it goes up as it is
        climb([Rung("smoke", check)], Clock(30, lambda why: 0.01))
    assert len(calls) == 1


def test_a_soak_is_asked_after_each_pause_until_its_clock_runs_out_and_must_pass_each_time():
    check, calls = asked([])
    climb([Rung("soak", check, holds=True)], Clock(0, lambda why: 0.01))
    assert calls == []  # a soak of 0 s asks nothing
    check, calls = asked([None] * 1000)
    started = time.monotonic()
    climb([Rung("soak", check, holds=True)], Clock(0.3, lambda why: 0.05 if why is None else 60))
    assert calls[0] - started >= 0.05 and calls[-1] - started >= 0.3  # first after a pause, last at the end
    assert 2 <= len(calls) <= 7, len(calls)  # every 0.05 s, not a busy loop
    check, calls = asked([None, Unhealthy("crashed during the soak")])
    with pytest.raises(Unhealthy, match="crashed during the soak"):
        climb([Rung("soak", check, holds=True)], Clock(30, lambda why: 0.01))
    assert len(calls) == 2


def test_the_probe_and_the_worker_import_no_circle():
    health = [group for group in house.circles(house.graph()) if any(".health." in m for m in group)]
    assert health == []
