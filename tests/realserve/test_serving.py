"""The real engine serving through the real `ds4-converge` CLI: one root, the scenarios in a deliberate order.

The engine repository holds both upstream versions (tags 8d57664, b030961) and three releases on top of 8d57664
that go wrong (conftest.engine_repo); the model is the session's phantom (86.7 GB apparent, so
model.memory_budget: warn). Each version is built by the tool once: install 8d57664 → a build that fails → an
engine that dies at start → one that answers wrongly → --power refused on 8d57664 → drain of a real stream →
SIGTERM of the tool during the probe → upgrade to b030961 → power 75 → speculative MTP → rollback. A test
relies on the state the ones before it left (pytest runs a module's tests in order); each says what it expects
to find. Every prompt is the 5-token "Hi" with max_tokens 1, which the disk KV cache answers without a prefill.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

import real_engine
from boxes import Box, free_port, report_document, two_free_ports
from serving import KV_CACHE_ARGS, PROMPT, WORD

# each token costs seconds here: bounded per test above the default 300 s (each wait inside is bounded too)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

# The engine's own -O3: its Makefile would take CFLAGS from the environment, but -O1 (build 27 s instead of ~40 s
# for 8d57664 on a loaded 2-core box) made each token about twice as slow (an uncached smoke: 233 s against 122 s),
# and the smokes cost more here than the builds
BUILD_ENV: dict[str, str] = {}
# a release that never serves a token is built at -O0: the same sources in a fraction of the time
NEVER_SERVES_ENV = {"CFLAGS": "-O0 -std=c99 -w"}
CONVERGE_TIMEOUT = 600


@pytest.fixture(scope="module")
def box(tmp_path_factory, engine_repo, phantom):
    made = Box(tmp_path_factory.mktemp("realserve") / "root", engine_repo, two_free_ports())  # two: the front door's slots
    made.spec = {
        "engine": {"repo": str(engine_repo), "ref": "8d57664", "target": "cpu", "jobs": 2},
        "model": {"main": str(phantom.main), "mtp": str(phantom.mtp), "memory_budget": "warn"},
        "server": {"port": made.port, "ctx": 1024, "stop_wait_s": 30, "drain_s": 180,
                   "kv_disk_dir": str(phantom.kv), "extra_args": KV_CACHE_ARGS},
        "health": {"deadline_s": 420, "soak_s": 1, "interval_s": 0.5,
                   "smoke": {"prompt": PROMPT, "expect": WORD, "max_tokens": 1}},
        "paths": {"root": str(made.root)},
    }
    made.write()
    yield made
    made.stop()


def converge(box: Box, *sets: str, env: dict | None = None) -> tuple[int, dict]:
    args = [a for s in sets for a in ("--set", s)]
    proc = box.cli(str(box.spec_path), "--json", *args, timeout=CONVERGE_TIMEOUT, env=env or BUILD_ENV)
    return proc.returncode, report_document(proc)


def role(document: dict, name: str) -> dict:
    return next(r for r in document["roles"] if r["name"] == name)


def serving(box: Box) -> tuple[str | None, int | None]:
    status = box.status()
    return status["release"], status["pid"]


def commit_of(box: Box, ref: str) -> str:
    return subprocess.run(["git", "rev-parse", f"{ref}^{{commit}}"], cwd=box.repo, capture_output=True, text=True,
                          check=True).stdout.strip()


def chat(box: Box, *, stream: bool = False, max_tokens: int = 1, timeout: float = 300):
    body = json.dumps({"model": "deepseek-chat", "messages": [{"role": "user", "content": PROMPT}],
                       "max_tokens": max_tokens, "temperature": 0, "stream": stream,
                       "thinking": {"type": "disabled"}}).encode()
    request = urllib.request.Request(f"{box.endpoint}/v1/chat/completions", body,
                                     {"content-type": "application/json"})
    return urllib.request.urlopen(request, timeout=timeout)


def answer(box: Box) -> str:
    with chat(box) as response:
        return json.loads(response.read())["choices"][0]["message"]["content"]


def release_flags(box: Box, release: str) -> set[str]:
    return set(json.loads((box.root / "releases" / release / "ds4-converge-release.json").read_text())["flags"])


def test_first_install_of_8d57664_serves_the_phantom(box):
    rc, document = converge(box)
    assert rc == 0 and document["ok"], document
    release = document["release"]
    assert release.startswith(commit_of(box, "8d57664")[:12] + "-cpu-"), release
    (warning,) = [w for w in role(document, "models")["warnings"] if "does not fit" in w]
    assert "model.memory_budget is warn, so the run goes on" in warning
    assert not any("--ssd-streaming" in w for w in role(document, "engine")["warnings"])  # 8d57664 has none
    assert serving(box)[0] == release


def test_a_release_whose_build_fails_stops_nothing(box):
    release, pid = serving(box)
    rc, document = converge(box, "engine.ref=broken-build")
    assert rc == 1 and not document["reverted"], document
    assert "build failed" in document["error"] and "the serving release is untouched" in document["error"]
    assert "this Makefile is broken on purpose" in document["error"] + (document["detail"] or "")
    assert serving(box) == (release, pid)


def test_a_release_that_dies_at_start_is_reverted_to_the_real_last_good(box):
    release, pid = serving(box)
    rc, document = converge(box, "engine.ref=dies-at-start", env=NEVER_SERVES_ENV)
    assert rc == 1 and document["reverted"], document
    assert "required metadata key is missing: deepseek4.block_count_v2" in document["error"], document["error"]
    now, new_pid = serving(box)
    assert now == release and new_pid not in (None, pid)


def test_a_release_that_hangs_is_reverted_within_its_own_deadline(box):
    """The real engine that never binds its port and ignores SIGTERM: it never served, so the revert neither
    drains it nor waits server.stop_wait_s (600 s here) for it: a short grace, SIGKILL, and last good answers."""
    release, _ = serving(box)
    started = time.monotonic()
    rc, document = converge(box, "engine.ref=hangs-at-start", "health.deadline_s=20", "server.stop_wait_s=600",
                            env=NEVER_SERVES_ENV)
    took = time.monotonic() - started
    assert rc == 1 and document["reverted"], document["error"]
    assert serving(box)[0] == release and answer(box) == " phantom"
    assert took < 400, f"the revert waited for the hung engine: {took:.0f} s"


def test_a_release_that_answers_wrongly_is_reverted_to_the_real_last_good(box):
    release, _ = serving(box)
    rc, document = converge(box, "engine.ref=wrong-answer")
    assert rc == 1 and document["reverted"], document
    assert "smoke answer" in document["error"] and f"does not contain {WORD!r}" in document["error"], document
    assert serving(box)[0] == release


def test_power_is_refused_on_8d57664_before_anything_stops(box):
    release, pid = serving(box)
    rc, document = converge(box, "server.power=75")
    assert rc == 1 and not document["reverted"], document
    assert "--power" in document["error"], document["error"]
    assert serving(box) == (release, pid)


def test_a_restart_waits_for_a_real_stream_in_flight(box):
    release, pid = serving(box)
    chunks: list[str] = []

    def stream():
        with chat(box, stream=True, max_tokens=2) as response:
            chunks.extend(line.decode() for line in response)

    reader = threading.Thread(target=stream)
    reader.start()
    try:
        time.sleep(2)  # the request is on the engine's socket: the drain counts its connection
        rc, document = converge(box, "server.threads=2")  # a restart of the same release
    finally:
        reader.join(120)
    assert not reader.is_alive()
    assert rc == 0 and document["ok"], document
    assert "request(s) in flight to finish" in role(document, "service")["msg"], role(document, "service")
    text = "".join(chunks)
    assert WORD in text and "data: [DONE]" in text, text  # the stream ended as the engine meant it to
    assert serving(box)[0] == release and serving(box)[1] != pid
    box.spec["server"]["threads"] = 2
    box.write()


def test_sigterm_of_the_tool_during_the_probe_reverts(box):
    release, pid = serving(box)
    proc = subprocess.Popen([sys.executable, "-m", "ds4_converge.cli", str(box.spec_path), "--json",
                             "--set", "server.threads=1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **BUILD_ENV, "NO_COLOR": "1",
                                 "XDG_CACHE_HOME": str(box.user_cache)})
    try:
        # the new engine listens (it binds once loaded): the tool is probing it
        def probing():
            new = serving(box)[1]
            if new in (None, pid):
                return False
            try:
                urllib.request.urlopen(f"{box.endpoint}/v1/models", timeout=2).close()
                return True
            except OSError:
                return False

        assert real_engine.wait_for(probing, timeout=120, interval=0.5) and proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=CONVERGE_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    document = json.loads(out)
    assert proc.returncode != 0 and document["reverted"], (document, err[-2000:])
    assert "interrupted" in document["error"] or "SIGTERM" in document["error"], document["error"]
    assert serving(box)[0] == release


def test_upgrade_to_b030961_builds_and_serves_the_newer_engine(box):
    before, _ = serving(box)
    rc, document = converge(box, "engine.ref=b030961")
    assert rc == 0 and document["ok"], document
    release = document["release"]
    assert release.startswith(commit_of(box, "b030961")[:12] + "-cpu-") and release != before
    assert {"--power", "--ssd-streaming"} <= release_flags(box, release)
    (hint,) = [w for w in role(document, "engine")["warnings"] if "--ssd-streaming" in w]
    assert "server.extra_args" in hint
    assert serving(box)[0] == release
    box.spec["engine"]["ref"] = "b030961"
    box.write()


def test_power_75_is_accepted_on_b030961(box):
    release, _ = serving(box)
    rc, document = converge(box, "server.power=75")
    assert rc == 0 and document["ok"], document
    assert "--power 75" in (box.root / "supervisor" / "programs" / "ds4.conf").read_text()
    assert serving(box)[0] == release


def test_speculative_mtp_with_the_phantom_support_file_is_accepted_on_b030961(box):
    rc, document = converge(box, "server.speculative.mode=mtp")
    assert rc == 0 and document["ok"], document
    conf = (box.root / "supervisor" / "programs" / "ds4.conf").read_text()
    assert "--mtp" in conf and str(box.spec["model"]["mtp"]) in conf


def test_rollback_goes_back_to_the_release_before_and_it_answers(box):
    current, _ = serving(box)
    proc = box.cli("rollback", str(box.spec_path), "--json", timeout=CONVERGE_TIMEOUT)
    document = report_document(proc)
    assert proc.returncode == 0 and document["ok"], document
    back, pid = serving(box)
    assert pid is not None and back == document["release"]
    assert answer(box) == " phantom"


FRONT_KEY = "sk-test-real-front-door"


def through_front(box: Box, port: int, timeout: float = 600) -> str:
    """The phantom's answer to "Hi" asked through the front door, with the key."""
    body = json.dumps({"model": "deepseek-chat", "messages": [{"role": "user", "content": PROMPT}],
                       "max_tokens": 1, "temperature": 0, "thinking": {"type": "disabled"}}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body,
                                     {"content-type": "application/json", "authorization": f"Bearer {FRONT_KEY}"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())["choices"][0]["message"]["content"]


class FrontClient(threading.Thread):
    """One request after another through the front door; every answer and every failure kept."""

    def __init__(self, box: Box, port: int):
        super().__init__(daemon=True)
        self.box, self.port, self.done = box, port, threading.Event()
        self.answers: list[str] = []
        self.failures: list[str] = []

    def run(self) -> None:
        while not self.done.is_set():
            try:
                self.answers.append(through_front(self.box, self.port))
            except (OSError, ValueError, KeyError) as exc:
                self.failures.append(repr(exc))
            time.sleep(0.2)

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=660)
        assert not self.is_alive(), "the client's last request never ended"


def crash_during_soak(box: Box) -> dict:
    """The held road (front.overlap off, a Spark's): a restart whose new engine gets clients once it answered its
    smoke, and is killed (SIGKILL, as a crash) during its soak while a client's request is on it (HAProxy's
    count of sessions on its slot)."""
    from ds4_converge.core.layout import Layout
    from ds4_converge.service.front import slot_counters

    before = box.status()["front"]["points_at"]
    result: dict = {}

    def run() -> None:
        result["rc"], result["document"] = converge(box, "front.overlap=off", "health.soak_s=600",
                                                    "server.env.DS4C_TEST_SETTING=crash")

    switching = threading.Thread(target=run, daemon=True)
    switching.start()
    deadline = time.monotonic() + CONVERGE_TIMEOUT
    flipped = None
    while switching.is_alive() and time.monotonic() < deadline and flipped is None:
        status = box.status()
        points_at = status["front"]["points_at"]
        if points_at and points_at != before and status["pid"]:
            flipped = status
        time.sleep(0.5)
    assert flipped is not None, result
    port = int(flipped["front"]["points_at"].rpartition(":")[2])
    while switching.is_alive() and time.monotonic() < deadline:  # a request (seconds each here) is on it
        found = slot_counters(Layout(box.root), "ds4", port)
        if found is not None and found.in_flight:
            break
        time.sleep(0.05)
    os.kill(flipped["pid"], signal.SIGKILL)
    result["killed_with_requests_on_it"] = found.in_flight if found else 0
    switching.join(CONVERGE_TIMEOUT)
    return result


@pytest.mark.timeout(2400)
def test_a_front_door_keeps_a_real_client_whole_through_an_upgrade_a_restart_and_a_revert(box, tmp_path):
    """The real engine behind HAProxy: one client asks all the time through an upgrade (8d57664 → b030961), a
    restart (a setting changed) and a release that answers wrongly (reverted); it meets no failure and no wrong
    answer: the new engine loads beside the serving one (front.overlap auto; a CPU build shares the phantom's
    mapping, so two fit), clients move once it passed, and the bad release's candidate is stopped while last good
    serves on. Then the held road (overlap off): clients reach the new engine after its smoke, it is killed during
    its soak, and is reverted; the client meets no failure there either."""
    keys = tmp_path / "keys"
    keys.write_text(FRONT_KEY + "\n")
    keys.chmod(0o600)
    front_port = free_port()
    box.spec["front"] = {"host": "127.0.0.1", "port": front_port, "hold_s": 600, "keys": str(keys), "metrics": None}
    box.spec["engine"]["ref"] = "8d57664"
    box.write()
    rc, document = converge(box)  # the engine moves behind the front door, onto a slot
    assert rc == 0 and document["ok"], document
    assert through_front(box, front_port).strip() == WORD
    client = FrontClient(box, front_port)
    client.start()
    try:
        rc, upgraded = converge(box, "engine.ref=b030961")
        assert rc == 0 and upgraded["ok"], upgraded
        # a CPU build computes from the phantom's mapping: a second engine adds its KV only, and loads beside
        assert "loads beside the serving one" in json.dumps(upgraded["roles"]), upgraded["roles"]
        box.spec["engine"]["ref"] = "b030961"
        box.write()
        _, before = serving(box)
        rc, restarted = converge(box, "server.env.DS4C_TEST_SETTING=restart")
        assert rc == 0 and restarted["ok"] and restarted["release"] == upgraded["release"], restarted
        _, last_good = serving(box)
        assert last_good != before
        rc, reverted = converge(box, "engine.ref=wrong-answer")
        assert rc == 1 and reverted["reverted"], reverted
        assert serving(box)[1] == last_good, "the bad release's candidate went; last good never stopped"
        crashed = crash_during_soak(box)
    finally:
        client.stop()
    assert crashed["rc"] == 1 and crashed["document"]["reverted"], crashed
    assert "crashed during the 600s soak" in crashed["document"]["error"], crashed["document"]["error"]
    assert re.search(r"it had answered \d+ client request\(s\) since its smoke", crashed["document"]["error"])
    assert crashed["killed_with_requests_on_it"] >= 1, crashed  # re-sent by HAProxy, held, answered by last good
    status = box.status()
    assert status["release"] == upgraded["release"] and status["front"]["up"], status
    assert status["front"]["points_at"] == status["endpoint"].removeprefix("http://"), status
    assert client.failures == [], client.failures
    assert client.answers and all(text.strip() == WORD for text in client.answers), client.answers
