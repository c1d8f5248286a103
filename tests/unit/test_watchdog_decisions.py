"""The watchdog's decision, pure: when it restarts, why, and how it backs off; busy is not hung; never blind."""
from ds4_converge.service.busy import FrontSlot, Judgement, Sample, judge
from ds4_converge.service.watchdog import PASSED, UNASKED, Finding, Settings, Tracker, judged, while_loading

S = Settings(name="ds4", endpoint="http://127.0.0.1:1", model="m", interval_s=10, completion_every_s=60,
             failures=3, backoff_max_s=100, deadline_s=30)


def failed(why: str) -> Finding:
    return Finding("failed", why, "/v1/models", 10.0)


def test_failures_in_a_row_restart_and_one_answer_resets_them():
    t = Tracker()
    assert t.observe(S, 0, "RUNNING", failed("refused")) is None
    assert t.observe(S, 10, "RUNNING", PASSED) is None  # answered: the count starts again
    assert t.observe(S, 20, "RUNNING", failed("hung")) is None
    assert t.observe(S, 30, "RUNNING", failed("hung")) is None
    assert t.observe(S, 40, "RUNNING", failed("/v1/models did not answer within 10s")) == \
        "3 checks failed in a row, the last: /v1/models did not answer within 10s"
    assert t.last_failure.fields() == {"check": "/v1/models", "timeout_s": 10.0}


def test_a_busy_look_is_no_failure_and_breaks_a_run_of_failures():
    t = Tracker()
    busy = Finding("busy", "busy: 1 request in flight, 0.5 s of CPU time in the last 10 s")
    for at in range(0, 200, 10):  # a long prefill: busy look after busy look, never a restart
        assert t.observe(S, at, "RUNNING", busy) is None
    assert t.observe(S, 200, "RUNNING", failed("hung")) is None
    assert t.observe(S, 210, "RUNNING", failed("hung")) is None
    assert t.observe(S, 220, "RUNNING", busy) is None  # progress again: the run of failures is over
    assert t.failures == 0


def test_an_exit_nobody_ordered_restarts_at_once_an_ordered_stop_never():
    t = Tracker()
    assert t.observe(S, 0, "EXITED", UNASKED, "exited (exit status 0)") == \
        "the engine exited (exit status 0), and no stop was ordered"
    assert Tracker().observe(S, 0, "FATAL", UNASKED, "is FATAL (x)").startswith("the engine is FATAL")
    assert Tracker().observe(S, 0, "STOPPED", UNASKED) is None


def test_restarts_back_off_until_a_check_passes():
    t = Tracker()
    assert t.restarted(S, 0) == 20  # interval x 2
    assert t.loading(5) and t.observe(S, 5, "RUNNING", UNASKED) is None  # loading (deadline_s 30), progressing
    assert t.failures == 0
    assert t.observe(S, 10, "EXITED", UNASKED, "exited (exit status 1)") is None  # backing off until 20
    assert t.observe(S, 20, "EXITED", UNASKED, "exited (exit status 1)") is not None
    assert t.restarted(S, 20) == 40
    assert t.restarted(S, 60) == 80
    assert t.restarted(S, 140) == 100  # at most backoff_max_s
    assert t.observe(S, 300, "RUNNING", PASSED) is None
    assert t.restarts == 0 and t.restarted(S, 300) == 20  # healthy again: the back-off starts over


def test_the_loading_window_ends_at_the_first_passed_check_so_a_second_hang_is_seen_as_fast():
    slow = Settings(**{**S.__dict__, "deadline_s": 900})  # the Spark example's deadline
    t = Tracker()
    t.restarted(slow, 0)
    assert t.loading(10) and t.observe(slow, 10, "RUNNING", UNASKED) is None  # loading
    assert t.observe(slow, 20, "RUNNING", PASSED) is None and not t.loading(30)  # loaded: no longer a window
    causes = [t.observe(slow, at, "RUNNING", failed("hung")) for at in (30, 40, 50)]
    assert causes[:2] == [None, None] and causes[2].startswith("3 checks failed"), causes


def test_a_restart_that_found_the_memory_short_is_owed_and_tried_again_after_its_back_off():
    t = Tracker()
    assert t.restarted(S, 0, started=False) == 20
    assert t.observe(S, 10, "STOPPED", UNASKED) is None  # backing off
    assert t.observe(S, 20, "STOPPED", UNASKED) == \
        "the last restart found the memory short and did not start the engine"
    t.restarted(S, 20, started=False)
    assert t.observe(S, 60, "EXITED", UNASKED, "was killed by SIGKILL").startswith("the last restart found")
    t.restarted(S, 60)
    assert t.observe(S, 200, "STOPPED", UNASKED) is None  # started since: a stop now was ordered by someone


def test_the_completion_is_due_every_completion_every_s_and_never_when_zero():
    t = Tracker()
    assert t.completion_due(S, 0)
    t.last_completion = 0
    assert not t.completion_due(S, 59) and t.completion_due(S, 60)
    never = Settings(**{**S.__dict__, "completion_every_s": 0})
    assert not Tracker().completion_due(never, 1000)


def test_a_check_that_did_not_answer_is_busy_only_with_work_in_flight_that_progresses():
    timeout = Finding("failed", "a one-token completion did not answer within 60s", "a one-token completion", 60.0)
    at_work = Judgement(in_flight=1, progressed=True, poisoned=False, words="1 request in flight, 2.0 s of CPU time")
    assert judged(timeout, at_work) == Finding("busy", "busy: 1 request in flight, 2.0 s of CPU time")
    for stuck in (Judgement(1, False, False, "1 request in flight, and no progress"),  # SIGSTOPped, wedged
                  Judgement(0, True, False, "0 requests in flight"),  # nothing to be busy with
                  Judgement(1, True, True, "only 5xx")):  # poisoned
        got = judged(timeout, stuck)
        assert got.outcome == "failed" and got.check == "a one-token completion" and got.timeout_s == 60.0, got
        assert got.why.startswith("a one-token completion did not answer within 60s; ")
    first_look = judge(None, Sample(at=0, cpu_ticks=5, in_flight=1))  # nothing to compare with yet
    assert not first_look.known and judged(timeout, first_look) == UNASKED


def test_progress_is_cpu_time_log_or_bytes_and_the_words_say_it():
    before = Sample(at=0, cpu_ticks=100, log_bytes=1000, in_flight=1, front=FrontSlot(1, 10_000, 5, 0))
    stuck = judge(before, Sample(at=10, cpu_ticks=100, log_bytes=1000, in_flight=1, front=FrontSlot(1, 10_000, 5, 0)),
                  ticks_per_s=100)
    assert not stuck.progressed and not stuck.busy
    assert stuck.words == "1 request in flight, and no progress (CPU time, log, bytes sent) in the last 10 s"
    cpu = judge(before, Sample(at=10, cpu_ticks=420, log_bytes=1000, in_flight=1), ticks_per_s=100)
    assert cpu.busy and cpu.words == "1 request in flight, 3.2 s of CPU time in the last 10 s"
    sent = judge(before, Sample(at=10, cpu_ticks=100, log_bytes=1000, in_flight=0,
                                front=FrontSlot(2, 3_210_000, 5, 0)), ticks_per_s=100)
    assert sent.busy and sent.in_flight == 2 and sent.words == "2 requests in flight, 3.2 MB sent in the last 10 s"
    log = judge(before, Sample(at=10, cpu_ticks=100, log_bytes=1500, in_flight=1), ticks_per_s=100)
    assert log.busy and "500 B of log" in log.words
    idle = judge(before, Sample(at=10, cpu_ticks=300, log_bytes=1000, in_flight=0), ticks_per_s=100)
    assert idle.progressed and not idle.busy  # CPU time, but nothing in flight: nothing to be busy with


def test_the_front_door_counting_only_5xx_is_poisoned_and_5xx_among_2xx_is_not():
    before = Sample(at=0, front=FrontSlot(0, 0, 10, 0))
    poisoned = judge(before, Sample(at=10, front=FrontSlot(1, 500, 10, 7)), ticks_per_s=100)
    assert poisoned.poisoned and not poisoned.busy and "7 5xx answer(s) and 0 2xx" in poisoned.words
    refusing = judge(before, Sample(at=10, front=FrontSlot(1, 500, 14, 7)), ticks_per_s=100)  # admission control
    assert not refusing.poisoned


def test_a_check_failed_while_loading_counts_only_when_the_load_does_not_progress():
    refused = Finding("failed", "/v1/models: ConnectionRefusedError: [Errno 111] Connection refused", "/v1/models", 1.0)
    assert while_loading(refused, judge(Sample(at=0, cpu_ticks=5), Sample(at=2, cpu_ticks=40), 100)) == UNASKED
    assert while_loading(refused, judge(None, Sample(at=0, cpu_ticks=5))) == UNASKED  # the first look: unknown
    stuck = while_loading(refused, judge(Sample(at=0, cpu_ticks=5, log_bytes=9), Sample(at=2, cpu_ticks=5,
                                                                                         log_bytes=9), 100))
    assert stuck.outcome == "failed" and stuck.check == "/v1/models", stuck
    assert stuck.why == ("/v1/models: ConnectionRefusedError: [Errno 111] Connection refused; loading, and no "
                         "progress (CPU time, log, bytes sent) in the last 2 s"), stuck


def test_failures_seen_while_a_run_owned_the_box_never_count_after_it():
    """A rollback stops the engine the watchdog watches: its looks fail while the run owns the box (no restart then).
    Counted on after the run, the first look that failed (the settings not yet rewritten) restarted the engine the
    run had just proven (CI found it)."""
    t = Tracker()
    assert t.observe(S, 0, "RUNNING", failed("refused")) is None
    assert t.observe(S, 10, "RUNNING", failed("refused")) is None
    assert t.observe(S, 20, "RUNNING", failed("refused")) is not None  # due, but the run's lock refuses it
    t.left_to_a_run()
    assert t.observe(S, 30, "RUNNING", failed("refused")) is None  # one failure after the run, not the fourth
    assert t.failures == 1 and t.last_failure.why == "refused"


def test_a_restart_judged_on_settings_a_run_has_since_replaced_is_not_done(tmp_path):
    """The look read watch.json before a rollback rewrote it (the engine moved to the other slot) and asked the slot
    it left; by the time the restart got the run lock the run was over. The engine that serves now was judged by
    nobody: no restart (the supervisor is never asked: None here would raise)."""
    from ds4_converge.core.layout import Layout
    from ds4_converge.service.watchdog import restart, write_settings

    layout = Layout(tmp_path / "root")
    layout.run.mkdir(parents=True)
    layout.logs.mkdir(parents=True)
    write_settings(layout, Settings(**{**S.__dict__, "endpoint": "http://127.0.0.1:2"}))  # the rollback's
    assert restart(layout, S, None, "2 checks failed in a row, the last: refused") is None
    assert not (layout.logs / "incidents.jsonl").exists()
