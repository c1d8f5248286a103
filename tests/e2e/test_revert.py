"""Upgrades to broken engines revert on their own; a failed build never touches the serving release."""
import os
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest
import requests

from boxes import report_document

FAULT_TAGS = ["v0.3.1-crash-at-start", "v0.3.1-hang", "v0.3.1-wrong-model", "v0.3.1-wrong-answer",
              "v0.3.1-crash-after"]


# what the report says for each fault: the real exit status and the engine's own last line, never
# supervisord's "exit status 0" for an engine that exited 1, nor "loading" for an engine that crashed
FAULT_REPORTS = {
    "v0.3.1-crash-at-start": ["ds4-server exited (exit status 1", "aborting startup"],
    "v0.3.1-hang": ["not ready within 6s (not listening yet (loading))"],
    "v0.3.1-wrong-model": ["/v1/models lists ['deepseek-v4-pro'], not deepseek-v4-flash"],
    "v0.3.1-wrong-answer": ["does not contain 'Paris'"],
    "v0.3.1-crash-after": ["crashed during the 5s soak (exit status 1", "worker thread failed"],
}


@pytest.mark.parametrize("tag", FAULT_TAGS)
def test_a_broken_upgrade_reverts_to_last_good(served_box, tag):
    box = served_box
    before = box.status()
    assert before["healthy"]
    # crash-after dies 3 s after it starts serving: the soak must outlast that. A hung load outlives SIGTERM
    # (as the real engine's does): the revert's stop ends it after stop_wait_s, kept short here.
    with box.edited({"engine.ref": tag, "health.deadline_s": 6, "health.soak_s": 5, "server.stop_wait_s": 10}):
        rc, document = box.converge()
    for words in FAULT_REPORTS[tag]:
        assert words in document["error"], document["error"]
    if "crash" in tag:
        detail = document["detail"]
        assert detail.startswith("last lines of this start:\n") and "ds4-converge logs" in detail, detail
        if tag.endswith("crash-at-start"):
            assert "listening on" not in detail, "an earlier start's lines are not this start's"
            # the hint names a command that runs from the shell that ran the converge (tests/unit/test_tool_command.py:
            # the venv's own script where the venv is not on PATH, as after make run)
            hint = re.search(r"\(the whole log: (.+)\)$", detail).group(1)
            logs = subprocess.run(shlex.split(hint), capture_output=True, text=True, timeout=60,
                                  env={**os.environ, "XDG_CACHE_HOME": str(box.user_cache)})
            assert logs.returncode == 0 and "aborting startup" in logs.stdout, (hint, logs.stdout, logs.stderr)
    assert rc == 1, document
    assert document["reverted"] and not document["ok"]
    assert f"reverted to {before['release']}" in document["error"]
    assert document["release"] == before["release"]
    after = box.status()
    assert after["healthy"] and after["release"] == before["release"] == after["last_good"], (after, document)
    assert after["pid"] != before["pid"]
    answer = requests.post(f"{box.endpoint}/v1/chat/completions", timeout=10, json={
        "model": "deepseek-chat", "messages": [{"role": "user", "content": "What is the capital of France?"}]})
    assert "Paris" in answer.json()["choices"][0]["message"]["content"]


def test_a_failed_build_leaves_the_serving_release_untouched(served_box):
    box = served_box
    before = box.status()
    with box.edited({"engine.ref": "v0.3.1-build-fails"}):
        rc, document = box.converge()
        logs = box.cli("logs", str(box.spec_path))
    assert rc == 1 and not document["reverted"]
    assert "build failed" in document["error"] and "serving release is untouched" in document["error"]
    after = box.status()
    assert (after["pid"], after["release"], after["healthy"]) == (before["pid"], before["release"], True)
    assert "failed build" in logs.stdout
    assert not any(p.name.startswith(".") for p in (box.root / "releases").iterdir()), "half-built tree left"


def test_first_install_that_fails_is_left_stopped(box):
    box.spec["engine"]["ref"] = "v0.3.1-crash-at-start"
    box.write()
    rc, document = box.converge()
    assert rc == 1 and not document["reverted"]
    assert "no last good release" in document["error"]
    assert "ds4-server exited (exit status 1" in document["error"], document  # not supervisord's "0"
    assert "aborting startup" in document["error"].split("; no last good")[0]  # the engine's own last words
    status = box.status()
    assert status["pid"] is None and status["last_good"] is None


def test_a_setting_the_binary_lacks_is_refused_before_anything_stops(served_box):
    box = served_box
    before = box.status()
    with box.edited({"engine.ref": "v0.1.0", "server.power": 90}):  # upstream flavour: no --power
        rc, document = box.converge()
    assert rc == 1 and not document["reverted"], document
    assert "server.power needs --power" in document["error"]
    after = box.status()
    assert (after["pid"], after["release"], after["healthy"]) == (before["pid"], before["release"], True)


def test_never_reverts_to_the_config_that_just_failed(box):
    """The engine died and its release's binary is now broken: restarting it fails, and last good is that
    very config, so there is nothing to revert to — the run fails without a pointless 'revert'."""
    rc, first = box.converge()
    assert rc == 0, first
    box.cli("stop", str(box.spec_path))
    server = box.root / "releases" / first["release"] / "ds4-server"
    server.write_text("#!/bin/sh\necho 'ds4: cuda backend unavailable; aborting startup' >&2\nexit 1\n")
    rc, document = box.converge()
    assert rc == 1 and not document["reverted"], document
    assert "is this same config, so there is nothing to revert to" in document["error"]
    assert "aborting startup" in document["error"], "the engine's own last words explain the failure"


def test_a_failed_build_shows_the_build_log_tail_in_json(served_box):
    box = served_box
    with box.edited({"engine.ref": "v0.3.1-build-fails"}):
        rc, document = box.converge()
    assert rc == 1 and "make -j2 cpu" in (document["detail"] or ""), document


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_the_probe_reverts(served_box, signum):
    """Ctrl-C, or the SIGTERM of systemd or an Ansible timeout, after the old engine was stopped: last good
    comes back before the tool exits, and the report says so."""
    box = served_box
    before = box.status()
    # a stuck load outlives SIGTERM, as the real engine's would: the revert's stop ends it with SIGKILL after
    # stop_wait_s, so keep that short here
    with box.edited({"engine.ref": "v0.3.1-hang", "server.stop_wait_s": 10}):
        run = subprocess.Popen([sys.executable, "-m", "ds4_converge.cli", str(box.spec_path), "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while box.status()["release"] == before["release"] and time.monotonic() < deadline:
            time.sleep(0.2)  # wait until the hanging release was started
        run.send_signal(signum)
        out, err = run.communicate(timeout=60)
    document = report_document(subprocess.CompletedProcess(run.args, run.returncode, out, err))
    assert run.returncode == 128 + signum, (document, err)
    assert document["reverted"] and document["aborted"] == "interrupted", document
    assert f"interrupted ({signal.Signals(signum).name})" in document["error"], document
    assert document["release"] == before["release"], "the report names what serves now"
    assert "Traceback" not in err
    after = box.status()
    assert after["release"] == before["release"] and after["healthy"]
