"""The watchdog tells busy from hung, with real supervisord and the simulated engine, tuned to fire fast:

- a client's long prefill on the upstream flavour (one request at a time) is busy, not hung: it completes with its
  answer, the engine is not restarted, and the watchdog's log says it was busy;
- a hang, then a hang of the restarted engine as it loads, then one right after it answers: each restarted
  within failures x (interval + timeout) + the stop grace, although health.deadline_s is long (the loading
  window ends at the first passed check, and a load that does not progress is no excuse);
- a SIGKILL from outside: the incident names SIGKILL and whether the kernel's OOM killer sent it;
- a poisoned engine (completions answer 500, /v1/models 200): restarted, the incident names the completion."""
import json
import os
import signal
import threading
import time
import urllib.request

import pytest

from boxes import FRONT_KEY, engine_pids, with_front
from test_watchdog import WATCHDOG, _answers, _incidents, _restarted_after, _wait

pytestmark = pytest.mark.slow

FAST = {**WATCHDOG, "completion_every_s": 1}  # interval 0.5 s, failures 2: a restart within about 3 s of a hang
PREFILL_TOK_S = 400
PROMPT_WORDS = 2400  # about 6 s of prefill at PREFILL_TOK_S: twelve looks of the watchdog
LOAD_S = 3  # a restarted engine's load: a hang within it must be seen too


def _ask(box, words: int, timeout: float = 60, front: bool = False) -> dict:
    prompt = " ".join(f"word{i % 97}" for i in range(words)) + ". Count from 1 to 3."
    body = json.dumps({"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": prompt}],
                       "max_tokens": 8, "thinking": {"type": "disabled"}}).encode()
    url, headers = f"{box.endpoint}/v1/chat/completions", {"Content-Type": "application/json"}
    if front:
        url, headers = f"http://127.0.0.1:{box.front_port}/v1/chat/completions", {
            **headers, "Authorization": f"Bearer {FRONT_KEY}"}
    request = urllib.request.Request(url, data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return json.loads(answer.read())


@pytest.mark.parametrize("front", [False, True], ids=["direct", "front-door"])
def test_a_long_prefill_is_busy_not_hung_and_completes_with_its_answer(box, front):
    if front:  # the watchdog also reads the front door's counters of the serving slot
        with_front(box)
    box.spec["engine"]["ref"] = "v0.1.0"  # upstream: one worker, a check would queue behind the prompt
    box.spec["server"]["env"]["DS4_SIM_PREFILL_TOK_S"] = str(PREFILL_TOK_S)
    box.spec["health"].update(watchdog=FAST)
    box.write()
    rc, document = box.converge()
    assert rc == 0, document
    (pid,) = engine_pids(box.root)
    time.sleep(1.5)  # a completion check is due before the prompt arrives, and all the time it is prefilled

    started = time.monotonic()
    answer = _ask(box, PROMPT_WORDS, front=front)
    took = time.monotonic() - started
    assert answer["choices"][0]["message"]["content"].strip(), answer
    assert took >= 4, f"the prefill took {took:.1f}s: too short to show anything"
    assert engine_pids(box.root) == {pid} and _incidents(box) == []
    said = (box.root / "logs" / "watchdog.log").read_text()
    assert "busy: 1 request in flight" in said and "the completion check waits for an idle moment" in said, said


def test_hangs_right_after_a_restart_are_restarted_as_fast_as_the_first_and_a_sigkill_is_named(box):
    box.spec["server"]["env"]["DS4_SIM_LOAD_SECONDS"] = str(LOAD_S)
    box.spec["health"].update(deadline_s=60, watchdog=FAST)  # a long load window: a restart must not be blind
    box.write()
    rc, document = box.converge()
    assert rc == 0, document
    bound = FAST["failures"] * (FAST["interval_s"] + 1) + 5 + 10  # + the stop grace + a slow, shared machine

    # hung while it serves; then the engine restarted for it hung as it loads, before any check of it passed;
    # then the next one right after it answers: each restarted within the bound
    _wait(lambda: _answers(box), 15, "the engine answering")
    (first,) = engine_pids(box.root)
    os.kill(first, signal.SIGSTOP)
    loading = _wait(lambda: next(iter(engine_pids(box.root) - {first}), None), bound, "the restarted engine")
    second = _stopped_until_restarted(box, loading, 2, within=bound + LOAD_S)
    first_incident = _incidents(box)[0]
    assert first_incident["pid"] == first and first_incident["new_pid"] == loading, first_incident
    assert "/v1/models did not answer within 1s" in first_incident["cause"], first_incident
    assert second["cause"].startswith("2 checks failed in a row, the last: /v1/models"), second
    assert "loading, and no progress" in second["cause"] and second["check"] == "/v1/models", second

    (pid,) = engine_pids(box.root)  # answering: _restarted_after waited for it
    third = _stopped_until_restarted(box, pid, 3, within=bound + LOAD_S)
    assert third["cause"].startswith("2 checks failed in a row, the last: /v1/models did not answer"), third

    (pid,) = engine_pids(box.root)
    os.kill(pid, signal.SIGKILL)
    killed = _restarted_after(box, pid, 4, timeout=15 + LOAD_S)
    assert killed["signal"] == "SIGKILL" and killed["check"] == "exit", killed
    assert killed["cause"] == "the engine was killed by SIGKILL, and no stop was ordered", killed
    # the kernel log is readable here or not: never a guess either way
    assert killed["oom_killer"] in ("no", "unknown"), killed
    status = box.status()
    assert status["watchdog"]["last_restart"]["signal"] == "SIGKILL", status
    said = box.cli("status", str(box.spec_path), env={"COLUMNS": "400"}).stdout
    assert f"killed by SIGKILL, and no stop was ordered (SIGKILL, OOM killer: {killed['oom_killer']})" in said, said
    metrics = (box.root / "metrics" / "ds4_converge.prom").read_text()
    assert 'signal="SIGKILL"' in metrics, metrics


POISONED_AFTER_S = 12  # the converge's probe passes first


def test_a_poisoned_engine_is_restarted(box):
    box.spec["server"]["env"]["DS4_SIM_FAULT"] = f"poisoned:{POISONED_AFTER_S}"
    box.spec["health"].update(watchdog=FAST)
    box.write()
    rc, document = box.converge()
    assert rc == 0, document
    (pid,) = engine_pids(box.root)
    assert _answers(box)
    incident = _restarted_after(box, pid, 1, timeout=POISONED_AFTER_S + 20)
    assert incident["cause"] == "2 checks failed in a row, the last: a one-token completion answered HTTP 500", \
        incident
    assert incident["check"] == "a one-token completion" and incident["timeout_s"] == 60, incident


def _stopped_until_restarted(box, pid: int, count: int, within: float) -> dict:
    """SIGSTOP the engine `pid`: the count-th incident, once a new engine answers within `within` s (the stopped
    one is let go after, if it is still there)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        hung = time.monotonic()
        incident = _restarted_after(box, pid, count, timeout=within)
        assert time.monotonic() - hung - 1.5 < within
        return incident
    finally:
        if pid in engine_pids(box.root):
            os.kill(pid, signal.SIGCONT)
