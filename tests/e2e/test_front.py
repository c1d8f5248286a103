"""The front door (spec `front`) with a real HAProxy under the real supervisord, in front of the simulated engine:
clients never see a switch, a bad release never answers them, and no one uses the endpoint without a key."""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest
import requests

from boxes import FRONT_KEY, Box, free_port, two_free_ports, with_front
from ds4_converge.facts import programs

pytestmark = pytest.mark.skipif(programs.haproxy() is None, reason="haproxy is not installed")

KEY = FRONT_KEY
QUESTION = {"model": "deepseek-chat", "max_tokens": 16,
            "messages": [{"role": "user", "content": "What is the capital of France?"}]}


def key_file(path, mode=0o600):
    path.write_text(f"# keys of the test endpoint\n{KEY}\n")
    os.chmod(path, mode)
    return path


def front_box(root, sim_repo) -> Box:
    made = with_front(Box(root, sim_repo, two_free_ports()))
    made.spec["server"]["env"]["DS4_SIM_LOAD_SECONDS"] = "2"  # long enough that a request meets no engine
    made.write()
    return made


@pytest.fixture(scope="module")
def fronted(tmp_path_factory, sim_repo):
    made = front_box(tmp_path_factory.mktemp("front") / "root", sim_repo)
    rc, document = made.converge()
    assert rc == 0, document
    yield made
    made.stop()


def ask(box, headers=None, timeout=120, question=QUESTION) -> requests.Response:
    return requests.post(f"http://127.0.0.1:{box.front_port}/v1/chat/completions", json=question, timeout=timeout,
                         headers={"Authorization": f"Bearer {KEY}"} if headers is None else headers)


# an answer of 6 s on the simulator (200 tokens/s): one of them is held through a switch and still being answered
# by the new engine seconds after the flip
LONG_QUESTION = {"model": "deepseek-chat", "max_tokens": 1200, "thinking": {"type": "disabled"},
                 "messages": [{"role": "user", "content": "Count from 1 to 100000, separated by spaces."}]}


class Client(threading.Thread):
    """A steady stream of requests through the front door; every answer is kept."""

    def __init__(self, box, pause=0.05, question=QUESTION):
        super().__init__(daemon=True)
        self.box, self.done, self.pause, self.question = box, threading.Event(), pause, question
        self.answers, self.failures, self.held = [], [], []
        self.spans = []  # (start, end) of each request, time.time()

    def run(self):
        while not self.done.is_set():
            started, wall = time.monotonic(), time.time()
            try:
                answer = ask(self.box, question=self.question)
                if answer.status_code != 200:
                    self.failures.append(f"HTTP {answer.status_code}: {answer.text[:200]}")
                else:
                    self.answers.append(answer.json()["choices"][0]["message"]["content"])
            except requests.RequestException as exc:
                self.failures.append(repr(exc))
            self.held.append(time.monotonic() - started)
            self.spans.append((wall, time.time()))
            time.sleep(self.pause)

    def stop(self):
        self.done.set()
        self.join(timeout=150)


def _say(document: dict) -> str:
    return json.dumps(document["roles"])


@contextlib.contextmanager
def streaming(box):
    """A client asking through the front door from a healthy start until the block ends: (first status, client)."""
    first = box.status()
    assert first["healthy"] and first["front"]["up"], first
    client = Client(box)
    client.start()
    try:
        time.sleep(1)
        yield first, client
        time.sleep(1)
    finally:
        client.stop()
    assert client.failures == [], client.failures
    assert client.answers and all("Paris" in a for a in client.answers), [a for a in client.answers if "Paris" not in a]


def test_a_client_sees_no_failure_and_no_bad_answer_through_an_upgrade_a_restart_and_a_revert(fronted):
    """front.overlap off: the serving engine stops first; requests are held while the new one loads and is
    probed on the other slot, then sent to it."""
    box = fronted
    with box.edited({"front.overlap": "off"}), streaming(box) as (first, client):
        with box.edited({"engine.ref": "v0.3.0"}):
            rc, upgraded = box.converge()
            assert rc == 0, upgraded["error"]
            assert "front.overlap is off" in _say(upgraded)
            after_upgrade = box.status()
            # the new engine took the idle slot, and the front door points at it now
            assert after_upgrade["endpoint"] != first["endpoint"], (first, after_upgrade)
            assert after_upgrade["front"]["points_at"] == after_upgrade["endpoint"].removeprefix("http://")
            time.sleep(1)
            with box.edited({"server.ctx": 16384}):  # a restart: same release, another setting
                rc, restarted = box.converge()
                assert rc == 0, restarted
                time.sleep(1)
            with box.edited({"engine.ref": "v0.3.1-wrong-answer"}):  # answers "London": reverted
                rc, reverted = box.converge()
            assert rc == 1 and reverted["reverted"], reverted
    status = box.status()
    assert status["release"] == after_upgrade["release"] or status["release"] == status["last_good"]
    # a revert never moves the front door: it points at last good's slot, where last good runs again
    assert status["front"]["points_at"] == status["endpoint"].removeprefix("http://"), status
    assert len(client.answers) > 20


def test_on_the_held_road_clients_wait_for_the_load_and_the_smoke_not_for_the_soak(fronted):
    """front.overlap off, a soak longer than the load: a held request goes to the new engine once it answered
    its smoke (front.flip: after-smoke, the default), while the soak goes on; after-soak holds it through the
    soak too. The plan says how long requests are held, with the load time measured at the last start."""
    box = fronted
    soak = 8.0
    with box.edited({"front.overlap": "off", "health.soak_s": soak}), streaming(box) as (first, client):
        with box.edited({"server.env.DS4C_TEST_SETTING": "flip-after-smoke"}):
            rc, restarted = box.converge()
            assert rc == 0, restarted["error"]
        during_flip = list(client.held)
        assert "s soak goes on while it serves (front.flip: after-smoke)" in _say(restarted), _say(restarted)
        assert "the load and the smoke (" in _say(restarted), _say(restarted)
        with box.edited({"front.flip": "after-soak"}):
            rc, held_through = box.converge()
            assert rc == 0, held_through["error"]
            assert f"the {soak:g}s soak (front.flip: after-soak)" in _say(held_through), _say(held_through)
    load_s = float(box.spec["server"]["env"]["DS4_SIM_LOAD_SECONDS"])
    # held for the drain, the stop, a load of 2 s and the smoke: seconds under the soak on a loaded machine
    assert load_s <= max(during_flip) < soak - 2, sorted(during_flip)[-5:]
    assert max(client.held) >= soak, sorted(client.held)[-5:]  # after-soak: the old road, held through the soak
    receipt = json.loads((box.root / "state.json").read_text())["good"][-1]
    assert load_s <= receipt["load_s"] < soak, receipt["load_s"]  # measured at its start, for the next plan


def test_a_release_that_crashes_while_its_soak_serves_clients_is_reverted_and_no_request_fails(fronted):
    """The held road flips after the smoke; the new engine crashes during the soak, with clients on it: HAProxy
    holds what arrives again (and re-sends what the dying engine never answered), last good comes back, and the
    report says how many requests the new engine answered meanwhile. The client meets no failure."""
    box = fronted
    long = Client(box, question=LONG_QUESTION)  # a held request still being answered when the engine dies
    long.start()
    with box.edited({"front.overlap": "off", "health.soak_s": 12}), streaming(box) as (first, client):
        # serves right, then dies 6 s after it binds: after its smoke, inside its soak
        with box.edited({"server.env.DS4_SIM_FAULT": "crash-after:6"}):
            rc, reverted = box.converge()
        long.stop()
        assert rc == 1 and reverted["reverted"], reverted
        assert "crashed during the 12s soak" in reverted["error"], reverted["error"]
        answered = re.search(r"it had answered (\d+) client request\(s\) since its smoke", reverted["error"])
        assert answered and int(answered.group(1)) > 0, reverted["error"]
        status = box.status()
        assert status["healthy"] and status["release"] == first["release"], status
        assert status["front"]["points_at"] == status["endpoint"].removeprefix("http://"), status
        time.sleep(1)
    assert long.failures == [] and long.answers, long.failures


def test_the_gate_benches_each_engine_alone_never_under_clients_requests(fronted):
    """health.max_regression: the serving engine is benched as the baseline and the new one by the gate. Beside
    (overlap auto) the serving engine has clients: each round waits for a quiet moment and is run again when a
    request came (HAProxy's stats); on the held road both benches run while clients are held. No kept round
    overlaps a client's request."""
    box = fronted
    results = box.root / "bench" / "results.jsonl"
    client = Client(box, pause=1.5)
    client.start()
    try:
        time.sleep(1)
        for overlap, setting in (("auto", "gate-beside"), ("off", "gate-held")):
            with box.edited({"health.max_regression": 0.9, "front.overlap": overlap,
                             "server.env.DS4C_TEST_SETTING": setting}):
                rc, document = box.converge()
            assert rc == 0, document["error"]
            assert "measured with clients' requests in flight" not in _say(document), _say(document)
    finally:
        client.stop()
    assert client.failures == [], client.failures
    records = [r for r in map(json.loads, results.read_text().splitlines()) if r["kind"] in ("baseline", "gate")]
    assert [r["kind"] for r in records] == ["baseline", "gate"] * 2, [r["kind"] for r in records]
    for record in records:
        alone = record["alone"]
        assert alone["checked"] and alone["contaminated"] == [], (record["kind"], alone)
    beside, held = records[0]["alone"], records[2]["alone"]
    assert held["redone"] == 0, held  # benched after the hold and the drain: nothing to wait for
    slack = 0.05
    for start, end in beside["rounds"]:
        met = [(a, b) for a, b in client.spans if a < end - slack and b > start + slack]
        assert not met, (start, end, met)


def test_with_memory_for_both_the_new_engine_loads_beside_the_serving_one_and_no_request_waits_for_it(fronted):
    """front.overlap auto, and the simulator's model set fits twice: the new engine loads and is probed as a
    candidate on the idle slot while last good keeps serving; clients move once it passed, and a release that
    fails its probe is stopped without last good ever being stopped. No request waits for a load."""
    box = fronted
    programs = box.root / "supervisor" / "programs"
    with streaming(box) as (first, client):
        with box.edited({"engine.ref": "v0.3.0", "server.ctx": 8192}):
            rc, upgraded = box.converge()
            assert rc == 0, upgraded["error"]
            assert "loads beside the serving one" in _say(upgraded), _say(upgraded)
            after_upgrade = box.status()
            # the new release ends on the slot clients know, under the engine's own program
            assert after_upgrade["endpoint"] == first["endpoint"] and after_upgrade["pid"] != first["pid"]
            assert after_upgrade["healthy"], after_upgrade
            assert after_upgrade["front"]["points_at"] == after_upgrade["endpoint"].removeprefix("http://")
            assert sorted(p.name for p in programs.iterdir()) == ["ds4.conf"]
            time.sleep(1)
            with box.edited({"engine.ref": "v0.3.1-wrong-answer"}):  # answers "London": its candidate is stopped
                rc, reverted = box.converge()
            assert rc == 1 and reverted["reverted"], reverted
            after_revert = box.status()
            # last good was never stopped: same process, same slot, and the candidate is gone
            assert after_revert["pid"] == after_upgrade["pid"], (after_upgrade, after_revert)
            assert after_revert["release"] == after_upgrade["release"]
            assert after_revert["front"]["points_at"] == after_upgrade["front"]["points_at"]
            assert sorted(p.name for p in programs.iterdir()) == ["ds4.conf"]
    # a held request waits at least for a load; here none did
    load_s = float(box.spec["server"]["env"]["DS4_SIM_LOAD_SECONDS"])
    assert max(client.held) < load_s, sorted(client.held)[-5:]


def test_a_request_without_the_right_key_gets_401_in_openais_shape(fronted):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY},
                    {"Authorization": "Bearer # keys of the test endpoint"}):
        answer = ask(fronted, headers=headers, timeout=10)
        assert answer.status_code == 401, (headers, answer.text)
        assert answer.json()["error"]["code"] == "invalid_api_key"
    assert ask(fronted, timeout=30).status_code == 200
    # the probe talks to the engine directly; the key file is read where it is, never copied
    config = (fronted.root / "front" / "haproxy.cfg").read_text()
    assert KEY not in config
    assert not any(KEY in p.read_text(errors="replace") for p in fronted.root.rglob("*")
                   if p.is_file() and p.stat().st_size < 1 << 20)


def test_the_metrics_endpoint_answers_and_status_says_where_the_front_door_points(fronted):
    metrics = requests.get(f"http://127.0.0.1:{fronted.metrics_port}/metrics", timeout=10)
    assert metrics.status_code == 200 and "haproxy_backend_http_responses_total" in metrics.text
    status = fronted.status()
    assert status["front"]["url"] == f"http://127.0.0.1:{fronted.front_port}"
    assert status["front"]["metrics"] == f"http://127.0.0.1:{fronted.metrics_port}/metrics"
    assert status["front"]["up"] and status["front"]["points_at"] == status["endpoint"].removeprefix("http://")
    text = fronted.cli("status", str(fronted.spec_path)).stdout
    assert f"front door  http://127.0.0.1:{fronted.front_port} → engine {status['front']['points_at']}" in text


def test_a_stopped_haproxy_is_named_with_its_pid_its_admin_socket_and_the_bound(fronted):
    """SIGSTOP: the process exists, its admin socket accepts and never answers. A switch failed after 16 s with
    only "timed out", and status said HAProxy does not run (issue 41)."""
    from ds4_converge.core.layout import Layout
    from ds4_converge.service import front
    from ds4_converge.service.supervisor import Supervisor

    master = fronted.status()["front"]
    assert master["up"] and master["problem"] is None, master
    layout = Layout(fronted.root)
    pids = [int(p) for p in subprocess.run(["pgrep", "-f", f"haproxy -W -db -f {fronted.root}/front/haproxy.cfg"],
                                           capture_output=True, text=True).stdout.split()]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(front.AdminTimeout, match=f"its admin socket {front.admin_socket(layout)} did not "
                                                     f"answer within {front.ADMIN_TIMEOUT_S} s"):
            front.servers(layout, "ds4")
        assert time.monotonic() - started < front.ADMIN_TIMEOUT_S + 5
        status = fronted.status()["front"]
        supervised = Supervisor(layout).info(front.PROGRAM)["pid"]  # HAProxy's master, as supervisord knows it
        assert not status["up"] and status["problem"].startswith(
            f"HAProxy does not answer (pid {supervised}, stopped?): its admin socket"), status
        text = fronted.cli("status", str(fronted.spec_path)).stdout
        assert f"down (HAProxy does not answer (pid {supervised}, stopped?)" in text, text
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    assert fronted.status()["front"]["up"]


def test_a_switch_behind_a_stopped_haproxy_fails_naming_it_and_the_engine_keeps_serving(tmp_path, sim_repo):
    """The switch used to fail after 16 s with only "service: timed out" (issue 41)."""
    from ds4_converge.core.layout import Layout
    from ds4_converge.service import front
    from ds4_converge.service.supervisor import Supervisor

    box = front_box(tmp_path / "root", sim_repo)
    try:
        rc, document = box.converge()
        assert rc == 0, document["error"]
        before = box.status()
        layout = Layout(box.root)
        master = Supervisor(layout).info(front.PROGRAM)["pid"]
        pids = [int(p) for p in subprocess.run(["pgrep", "-f", f"haproxy -W -db -f {front.config_path(layout)}"],
                                               capture_output=True, text=True).stdout.split()]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            rc, document = box.converge("--set", "server.env.DS4_SIM_TAG=switched")
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        assert rc == 1, document
        assert (f"HAProxy does not answer (pid {master}, stopped?): its admin socket {front.admin_socket(layout)} "
                f"did not answer within {front.ADMIN_TIMEOUT_S} s") in document["error"], document["error"]
        after = box.status()
        assert after["healthy"] and after["release"] == before["release"], after
        assert ask(box, timeout=30).ok
    finally:
        box.stop()


def test_haproxy_that_dies_is_started_again_by_supervisord(fronted):
    pid = int(subprocess.run(["pgrep", "-f", f"haproxy -W -db -f {fronted.root}/front/haproxy.cfg"],
                             capture_output=True, text=True).stdout.split()[0])
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if ask(fronted, timeout=5).status_code == 200:
                break
        except requests.RequestException:
            pass
        time.sleep(0.3)
    else:
        raise AssertionError("the front door did not come back")
    status = fronted.status()
    assert status["front"]["up"] and status["front"]["points_at"] == status["endpoint"].removeprefix("http://")


@pytest.mark.parametrize("problem", ["missing", "readable by others"])
def test_a_key_file_missing_or_readable_by_others_is_refused_before_anything_changes(tmp_path, sim_repo, problem):
    box = front_box(tmp_path / "root", sim_repo)
    keys = tmp_path / "root-keys"
    if problem == "missing":
        keys.unlink()
    else:
        os.chmod(keys, 0o644)
    rc, document = box.converge()
    assert rc == 1 and not document["reverted"], document
    assert "front.keys" in document["error"] and ("chmod 600" in document["error"] or problem == "missing")
    assert not box.root.exists(), "a run refused by preflight leaves no trace"


def test_ports_that_collide_are_refused_at_validation(tmp_path, sim_repo):
    box = front_box(tmp_path / "root", sim_repo)
    box.spec["front"]["port"] = box.port + 1
    box.write()
    proc = box.cli(str(box.spec_path))
    assert proc.returncode == 2, proc
    assert "front.port" in proc.stderr + proc.stdout and "second slot" in proc.stderr + proc.stdout
    assert not box.root.exists()


def test_a_front_port_held_by_someone_else_leaves_the_box_as_it_was(tmp_path, sim_repo):
    box = front_box(tmp_path / "root", sim_repo)
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", box.front_port))
        holder.listen()
        rc, document = box.converge()
    assert rc == 1, document
    assert f"front.port: port {box.front_port} is held by pid {os.getpid()}" in document["error"], document["error"]
    assert not box.root.exists()


def test_a_port_another_root_of_this_tool_serves_on_is_named_with_that_root_and_its_stop_command(fronted, tmp_path,
                                                                                                  sim_repo):
    """README's two examples share :8000: the refusal names the root that holds it and its `stop`, for the front
    door's port held by that root's engine, and for an engine's port held by that root's HAProxy."""
    front_on_its_engine = front_box(tmp_path / "a", sim_repo)
    front_on_its_engine.spec["front"]["port"] = int(fronted.status()["front"]["points_at"].rsplit(":", 1)[1])
    engine_on_its_front = Box(tmp_path / "b", sim_repo, free_port())
    engine_on_its_front.spec["server"]["port"] = fronted.front_port
    for box, field, holder in ((front_on_its_engine, "front.port", "ds4-server"),
                               (engine_on_its_front, "server.port", "haproxy")):
        box.write()
        rc, document = box.converge("--check")
        assert rc == 1, document
        assert f"(paths.root {fronted.root})" in document["error"] and f"({holder})" in document["error"], document
        assert f"stop SPEC, with the spec whose paths.root is {fronted.root}" in document["error"], document
        assert f"or choose another {field}" in document["error"], document
        assert not box.root.exists()

def test_a_front_port_is_judged_by_front_host_address(tmp_path, sim_repo):
    """Another address's listener on the same port is no collision (the rule of server.host): boxes on one machine
    share a public port on different addresses; the same address, or a wildcard, is refused."""
    box = front_box(tmp_path / "root", sim_repo)
    box.spec["front"]["host"] = "127.0.0.3"
    box.write()
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", box.front_port))
        holder.listen()
        rc, document = box.converge("--check")
        assert rc == 0 and "held by" not in json.dumps(document), document
    for address in ("127.0.0.3", "0.0.0.0"):
        with socket.socket() as holder:
            holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            holder.bind((address, box.front_port))
            holder.listen()
            rc, document = box.converge("--check")
        assert rc == 1, document
        assert f"front.port: port {box.front_port} is held by pid {os.getpid()}" in document["error"], document
    assert not box.root.exists()


def test_tls_when_a_certificate_and_key_are_given(tmp_path, sim_repo):
    box = front_box(tmp_path / "root", sim_repo)
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    os.chmod(key, 0o600)
    box.spec["front"]["tls"] = {"cert": str(cert), "key": str(key)}
    box.write()
    try:
        rc, document = box.converge()
        assert rc == 0, document
        assert document["front"]["url"] == f"https://127.0.0.1:{box.front_port}"
        answer = requests.post(f"https://127.0.0.1:{box.front_port}/v1/chat/completions", json=QUESTION,
                               headers={"Authorization": f"Bearer {KEY}"}, verify=str(cert), timeout=30)
        assert answer.status_code == 200 and "Paris" in json.dumps(answer.json())
        with pytest.raises(requests.RequestException):  # plain HTTP is not served
            requests.get(f"http://127.0.0.1:{box.front_port}/v1/models", timeout=5)
        assert key.read_text() not in "".join(p.read_text(errors="replace") for p in box.root.rglob("*")
                                              if p.is_file() and not p.is_symlink() and p.stat().st_size < 1 << 20)
    finally:
        box.stop()


def test_a_front_door_added_to_a_serving_box_keeps_its_engine_and_one_that_cannot_start_leaves_it_as_it_was(
        tmp_path, sim_repo):
    box = front_box(tmp_path / "root", sim_repo)
    front = box.spec.pop("front")
    box.write()
    try:
        rc, document = box.converge()
        assert rc == 0, document["error"]
        before = box.status()
        conf = (box.root / "supervisor" / "supervisord.conf").read_text()
        # a certificate HAProxy cannot load: preflight sees a file; HAProxy refuses to start
        bad = tmp_path / "bad.pem"
        bad.write_text("not a certificate\n")
        box.spec["front"] = {**front, "tls": {"cert": str(bad), "key": str(bad)}}
        box.write()
        rc, document = box.converge()
        assert rc == 1 and not document["reverted"], (document["error"], document)
        assert "front: HAProxy does not start" in document["error"], document["error"]
        assert (box.root / "supervisor" / "supervisord.conf").read_text() == conf
        after = box.status()
        assert (after["pid"], after["release"], after["healthy"]) == (before["pid"], before["release"], True)
        assert after["front"]["up"] is False
        # the same front door without the bad certificate: the engine keeps running on its port (slot a)
        box.spec["front"] = front
        box.write()
        rc, document = box.converge()
        assert rc == 0, document["error"]
        fronted = box.status()
        assert fronted["pid"] == before["pid"] and fronted["front"]["points_at"] == f"127.0.0.1:{box.port}"
        assert ask(box, timeout=30).status_code == 200
    finally:
        box.stop()


def test_a_front_door_reload_that_fails_fails_the_run_and_leaves_the_front_door_as_it_was(tmp_path, sim_repo):
    """A reload HAProxy could not do was a run that exited 0 saying "serving" while the old worker went on with the
    old config (issue 41): now the run fails, the old files are back, and the front door serves as it did."""
    from ds4_converge.core.layout import Layout
    from ds4_converge.service import front
    from ds4_converge.service.supervisor import Supervisor

    box = front_box(tmp_path / "root", sim_repo)
    layout = Layout(box.root)
    try:
        rc, document = box.converge()
        assert rc == 0, document["error"]
        before, config = box.status(), front.config_path(layout).read_text()
        bad = tmp_path / "bad.pem"  # preflight sees a file; HAProxy cannot load it
        bad.write_text("not a certificate\n")
        box.spec["front"]["tls"] = {"cert": str(bad), "key": str(bad)}
        box.write()
        rc, document = box.converge()
        assert rc == 1 and not document["reverted"], document
        assert "front: HAProxy refuses the new config" in document["error"], document["error"]
        assert "config was put back" in document["error"], document["error"]
        assert front.config_path(layout).read_text() == config and not front.tls_path(layout).is_symlink()
        after = box.status()
        assert (after["pid"], after["front"]["up"]) == (before["pid"], True) and ask(box, timeout=30).ok
        # a config HAProxy's check passes but whose address it cannot bind: its old worker goes on serving
        front.config_path(layout).write_text(config.replace(f"'127.0.0.1:{box.front_port}'",
                                                            f"'192.0.2.1:{box.front_port}'"))
        with pytest.raises(front.FrontError, match="reload failed, its old worker serves on .*cannot bind"):
            front.reload(layout, Supervisor(layout), front.executable())
        assert ask(box, timeout=30).ok
    finally:
        box.stop()


def test_after_a_rollback_to_the_other_slot_the_watchdog_watches_the_engine_that_serves(tmp_path, sim_repo):
    """A rollback moves the engine to the other slot: the watchdog must ask it there. Watching the slot it left
    (refused connections) it restarted a healthy engine under traffic every few checks (a fleet run found it)."""
    box = front_box(tmp_path / "root", sim_repo)
    box.spec["health"]["watchdog"] = {"interval_s": 0.3, "failures": 2}
    box.spec["front"]["overlap"] = "off"  # an upgrade moves to the other slot; a rollback comes back
    box.write()
    try:
        rc, document = box.converge()
        assert rc == 0, document["error"]
        with box.edited({"engine.ref": "v0.3.0"}):
            rc, upgraded = box.converge()
            assert rc == 0, upgraded["error"]
        upgraded = box.status()
        rc, rolled = box.json("rollback", str(box.spec_path))
        assert rc == 0 and rolled["ok"], rolled
        status = box.status()
        assert status["endpoint"] != upgraded["endpoint"], (status, upgraded)  # the other slot
        watched = json.loads((box.root / "run" / "watch.json").read_text())
        assert watched["endpoint"] == status["endpoint"], (watched, status)
        time.sleep(3)  # ten of the watchdog's intervals: a stale watch would have restarted the engine by now
        later = box.status()
        incidents = box.root / "logs" / "incidents.jsonl"
        assert later["pid"] == status["pid"] and later["healthy"], (
            later.get("error"), later["watchdog"], status.get("error"),
            incidents.read_text() if incidents.exists() else "no incidents file")
        assert later["watchdog"]["incidents"] == 0, later["watchdog"]
    finally:
        box.stop()
