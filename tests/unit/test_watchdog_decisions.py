"""The watchdog's decision, pure: when it restarts, why, and how it backs off."""
from ds4_converge.service.watchdog import Settings, Tracker

S = Settings(name="ds4", endpoint="http://127.0.0.1:1", model="m", interval_s=10, completion_every_s=60,
             failures=3, backoff_max_s=100, deadline_s=30)


def test_failures_in_a_row_restart_and_one_answer_resets_them():
    t = Tracker()
    assert t.observe(S, 0, "RUNNING", False, "refused") is None
    assert t.observe(S, 10, "RUNNING", True, "") is None  # answered: the count starts again
    assert t.observe(S, 20, "RUNNING", False, "hung") is None
    assert t.observe(S, 30, "RUNNING", False, "hung") is None
    assert t.observe(S, 40, "RUNNING", False, "no answer within 10s (hung?)") == \
        "3 checks failed in a row, the last: no answer within 10s (hung?)"


def test_an_exit_nobody_ordered_restarts_at_once_an_ordered_stop_never():
    t = Tracker()
    assert t.observe(S, 0, "EXITED", None, "exited (exit status 0)") == \
        "the engine exited (exit status 0), and no stop was ordered"
    assert Tracker().observe(S, 0, "FATAL", None, "is FATAL (x)").startswith("the engine is FATAL")
    assert Tracker().observe(S, 0, "STOPPED", None, "") is None


def test_restarts_back_off_until_a_check_passes_and_a_loading_engine_is_not_counted():
    t = Tracker()
    assert t.restarted(S, 0) == 20  # interval x 2
    assert t.observe(S, 5, "RUNNING", False, "refused") is None  # loading (deadline_s 30)
    assert t.failures == 0
    assert t.observe(S, 10, "EXITED", None, "exited (exit status 1)") is None  # backing off until 20
    assert t.observe(S, 20, "EXITED", None, "exited (exit status 1)") is not None
    assert t.restarted(S, 20) == 40
    assert t.restarted(S, 60) == 80
    assert t.restarted(S, 140) == 100  # at most backoff_max_s
    assert t.observe(S, 300, "RUNNING", True, "") is None
    assert t.restarts == 0 and t.restarted(S, 300) == 20  # healthy again: the back-off starts over


def test_the_completion_is_due_every_completion_every_s_and_never_when_zero():
    t = Tracker()
    assert t.completion_due(S, 0)
    t.last_completion = 0
    assert not t.completion_due(S, 59) and t.completion_due(S, 60)
    never = Settings(**{**S.__dict__, "completion_every_s": 0})
    assert not Tracker().completion_due(never, 1000)
