"""Signals and fault switches of ds4-server."""

import re
import signal
import socket
import threading
import time

import requests

from engine_sim_support import serve


def test_sigterm_exit_0_with_kv_persist(start, fork, tmp_path):
    kv = tmp_path / "kvcache"
    p, url = serve(start, fork, "--kv-disk-dir", kv, "--kv-cache-min-tokens", "1")
    requests.post(url + "/v1/chat/completions", timeout=10,
                  json={"messages": [{"role": "user", "content": "hello"}], "think": False})
    assert p.stop(signal.SIGTERM) == 0
    log = p.log()
    assert "ds4-server: shutdown requested, draining requests" in log
    assert "ds4-server: persisting current KV cache before shutdown tokens=" in log
    files = list(kv.glob("*.kv"))
    assert len(files) == 1 and files[0].read_bytes()[:3] == b"KVC"
    assert len(files[0].stem) == 40


def test_sigint_exit_0_and_port_closed(start, upstream):
    p, url = serve(start, upstream)
    port = int(url.rsplit(":", 1)[1])
    assert p.stop(signal.SIGINT) == 0
    assert "shutdown requested" in p.log()
    assert "persisting" not in p.log()
    s = socket.socket()
    assert s.connect_ex(("127.0.0.1", port)) != 0
    s.close()


def test_sigterm_during_load_waits_for_the_load(start, upstream):
    """The real server's first SIGTERM only sets a flag: the load runs to its end (nothing in it looks at
    the flag), the server binds, logs that it listens, and then shuts down cleanly."""
    p, port = start(upstream, env={"DS4_SIM_LOAD_SECONDS": "2"})
    assert p.wait_for("ds4: CPU backend: mapping", 10), p.log()
    t0 = time.time()
    assert p.stop(signal.SIGTERM, timeout=10) == 0
    assert time.time() - t0 > 1.2
    log = p.log()
    assert log.index("listening on") < log.index("shutdown requested, draining requests")


def _second_signal_exits_130(p, second, settle_s: float) -> None:
    """A first SIGTERM only sets a flag (the process lives on); a second signal ends it with 130 at once."""
    p.p.send_signal(signal.SIGTERM)
    time.sleep(settle_s)
    assert p.p.poll() is None
    assert p.stop(second, timeout=5) == 130


def test_second_signal_exits_130_at_once(start, upstream):
    p, port = start(upstream, env={"DS4_SIM_LOAD_SECONDS": "60"})
    assert p.wait_for("ds4: CPU backend: mapping", 10), p.log()
    _second_signal_exits_130(p, signal.SIGINT, settle_s=0.3)


def test_sigterm_cuts_running_stream(start, upstream):
    p, url = serve(start, upstream, env={"DS4_SIM_DECODE_TOK_S": "5"})
    got = []

    def client():
        try:
            r = requests.post(url + "/v1/chat/completions", stream=True, timeout=30, json={
                "messages": [{"role": "user", "content": "hi"}], "stream": True})
            for line in r.iter_lines():
                got.append(line)
        except requests.RequestException:
            got.append(b"<cut>")

    t = threading.Thread(target=client)
    t.start()
    time.sleep(0.8)
    t0 = time.time()
    assert p.stop(signal.SIGTERM) == 0
    t.join(10)
    assert time.time() - t0 < 5
    assert b"data: [DONE]" not in got
    # the real server's line for a generation stopped by the shutdown
    assert re.search(r'ds4-server: chat ctx=0\.\.\d+:\d+ gen=\d+ finish=error error="shutdown requested" \d+\.\d{3}s',
                     p.log()), p.log()


def test_fault_crash_at_start(start, fork):
    p, _ = start(fork, env={"DS4_SIM_FAULT": "crash-at-start"})
    assert p.wait(15) == 1
    log = p.log()
    assert "aborting startup" in log.splitlines()[-1] and "listening" not in log


def test_fault_crash_after(start, fork):
    p, url = serve(start, fork, env={"DS4_SIM_FAULT": "crash-after:1"})
    assert requests.get(url + "/v1/models", timeout=5).status_code == 200
    assert p.wait(10) == 1
    assert "error" in p.log().splitlines()[-1].lower()


def test_fault_hang_never_binds_and_outlives_sigterm(start, fork):
    """A load that never ends cannot be stopped by SIGTERM (the real one would not be): a supervisor must
    send SIGKILL after its grace period, or a second signal ends it with 130."""
    p, port = start(fork, env={"DS4_SIM_FAULT": "hang"})
    # the load has begun, so its SIGTERM handler is in place (a fixed sleep was not always enough on a busy host:
    # Python still starting, the default action killed it with -15), and it has had time to bind, were it to
    assert p.wait_for("ds4: CPU backend", 30), p.log()
    time.sleep(1.0)
    assert p.p.poll() is None
    s = socket.socket()
    assert s.connect_ex(("127.0.0.1", port)) != 0
    s.close()
    assert "listening" not in p.log()
    _second_signal_exits_130(p, signal.SIGTERM, settle_s=1.0)


def test_fault_wrong_model(start, fork):
    p, url = serve(start, fork, env={"DS4_SIM_FAULT": "wrong-model"})
    ids = [m["id"] for m in requests.get(url + "/v1/models", timeout=5).json()["data"]]
    assert ids == ["deepseek-v4-pro"]
    assert p.stop() == 0


def test_fault_wrong_answer(start, upstream):
    p, url = serve(start, upstream, env={"DS4_SIM_FAULT": "wrong-answer"})
    r = requests.post(url + "/v1/chat/completions", timeout=10, json={
        "messages": [{"role": "user", "content": "What is the capital of France?"}], "think": False}).json()
    content = r["choices"][0]["message"]["content"]
    assert "London" in content and "Paris" not in content
    assert p.stop() == 0


def test_no_fault_env_none_overrides_compiled_fault(start, builds):
    binary = builds.build("v0.3.1-wrong-answer") / "ds4-server"
    p, url = serve(start, binary)
    ask = {"messages": [{"role": "user", "content": "What is the capital of France?"}], "think": False}
    assert "London" in requests.post(url + "/v1/chat/completions", json=ask, timeout=10).json()[
        "choices"][0]["message"]["content"]
    p.stop()
    p, url = serve(start, binary, env={"DS4_SIM_FAULT": "none"})
    assert "Paris" in requests.post(url + "/v1/chat/completions", json=ask, timeout=10).json()[
        "choices"][0]["message"]["content"]
    p.stop()


def test_compiled_crash_after_tag(start, builds):
    binary = builds.build("v0.3.1-crash-after") / "ds4-server"
    p, url = serve(start, binary)
    assert p.wait(10) == 1
