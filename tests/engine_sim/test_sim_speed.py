"""The simulated engine's speed follows its flags and environment (ds4_speed.py): power, speculation that
helps or hurts, prefill rate, prefix hits, fork batching, and answers as long as asked.

Rates are compared with each other (faster / slower by a wide margin), never against a wall-clock target."""

import threading
import time

import pytest
import requests

from engine_sim_support import MODELS

# a realistic GB10-like profile, run 4x faster than life: a decode step sleeps 17 ms (30 tok/s: 8 ms), so what a busy
# host adds to every step (a late wake-up, the sim's own Python work: a few ms under `pytest -n 4` on 2 cores) stays
# small beside it; at 10x (7 ms steps) that constant cost flattened every ratio below its margin
PROFILE = {"DS4_SIM_DECODE_TOK_S": "15", "DS4_SIM_PREFILL_TOK_S": "700", "DS4_SIM_TIME_SCALE": "0.25"}


def serve(start, binary, *args, env=None):
    p, port = start(binary, "--ctx", "16384", *args, env={**PROFILE, **(env or {})})
    assert p.wait_for("listening on", 10), p.log()
    return "http://127.0.0.1:%d" % port


def count(url, n, *, system="", max_tokens=None):
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": "Count from 1 to %d." % n}]
    r = requests.post(url + "/v1/chat/completions", timeout=60, json={
        "messages": messages, "think": False, "max_tokens": max_tokens or n + 5})
    assert r.status_code == 200, r.text
    return r.json()


def test_an_answer_is_as_long_as_asked(start, fork):
    url = serve(start, fork, "--no-spec")
    body = count(url, 40)
    assert body["choices"][0]["message"]["content"].split() == [str(i) for i in range(1, 41)]
    assert body["choices"][0]["finish_reason"] == "stop"
    cut = count(url, 40, max_tokens=10)
    assert cut["choices"][0]["finish_reason"] == "length" and cut["usage"]["completion_tokens"] == 10


def test_power_scales_decode(start, fork):
    full = count(serve(start, fork, "--no-spec"), 30)["timings"]["decode_tok_s"]
    half = count(serve(start, fork, "--no-spec", "--power", "50"), 30)["timings"]["decode_tok_s"]
    assert half < 0.7 * full, (half, full)


@pytest.mark.parametrize("accept, faster", [("0.9", True), ("0.1", False)])
def test_mtp_helps_or_hurts_with_its_acceptance(start, fork, accept, faster):
    plain = count(serve(start, fork, "--no-spec"), 30)["timings"]
    mtp = count(serve(start, fork, "--mtp", MODELS / "tiny-mtp.gguf", "--mtp-draft", "2",
                      env={"DS4_SIM_MTP_ACCEPT": accept, "DS4_SIM_MTP_OVERHEAD": "0.3"}), 30)["timings"]
    assert mtp["spec_accept_rate"] == float(accept) and "spec_accept_rate" not in plain
    if faster:
        assert mtp["decode_tok_s"] > 1.3 * plain["decode_tok_s"], (mtp, plain)
    else:
        assert mtp["decode_tok_s"] < 0.8 * plain["decode_tok_s"], (mtp, plain)


def test_dspark_drafter_speed_follows_its_acceptance(start, fork):
    drafter = MODELS / "tiny-dspark-legacy.gguf"
    good = count(serve(start, fork, "--dspark", drafter, env={"DS4_SIM_DSPARK_ACCEPT": "0.8"}), 30)["timings"]
    bad = count(serve(start, fork, "--dspark", drafter, env={"DS4_SIM_DSPARK_ACCEPT": "0.05"}), 30)["timings"]
    assert good["decode_tok_s"] > 1.5 * bad["decode_tok_s"] and good["tok_per_step"] > bad["tok_per_step"]


def test_prefill_rate_and_prefix_hits(start, upstream):
    url = serve(start, upstream, env={"DS4_SIM_PREFILL_TOK_S": "300"})
    system = "You are an agent. " + " ".join("rule%d applies." % i for i in range(600))
    t0 = time.monotonic()
    cold = count(url, 3, system=system)
    cold_s = time.monotonic() - t0
    t0 = time.monotonic()
    warm = count(url, 4, system=system)  # same system prompt, another question: the prefix is in the KV cache
    warm_s = time.monotonic() - t0
    assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] > 1500
    assert warm_s < cold_s / 3, (warm_s, cold_s)  # ~1800 tokens at 300 tok/s, scaled: 1.5 s of prefill skipped


def _stream_rates(url, clients):
    rates, done = [], []

    def one():
        t0 = time.monotonic()
        body = count(url, 40)
        rates.append(body.get("timings", {}).get("decode_tok_s"))
        done.append((time.monotonic() - t0, body["usage"]["completion_tokens"]))

    threads = [threading.Thread(target=one) for _ in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    wall = time.monotonic() - t0
    return sum(n for _, n in done) / wall, rates


def test_the_fork_batches_concurrent_requests(start, fork, upstream):
    fork_url = serve(start, fork, "--no-spec", env={"DS4_SIM_DECODE_TOK_S": "30"})
    alone, _ = _stream_rates(fork_url, 1)
    together, per_client = _stream_rates(fork_url, 4)
    assert together > 1.5 * alone, (together, alone)  # aggregate throughput rises with clients
    assert max(per_client) < 0.9 * alone  # while each client gets less
    upstream_url = serve(start, upstream, env={"DS4_SIM_DECODE_TOK_S": "30"})
    serial_alone, _ = _stream_rates(upstream_url, 1)
    serial_together, _ = _stream_rates(upstream_url, 4)
    assert serial_together < 1.3 * serial_alone  # upstream serialises generation


def test_metrics_count_requests_in_flight(start, fork):
    url = serve(start, fork, "--no-spec")
    client = threading.Thread(target=count, args=(url, 30))
    client.start()
    deadline = time.monotonic() + 5
    seen = 0
    while time.monotonic() < deadline and not seen:
        text = requests.get(url + "/metrics", timeout=5).text
        seen = int(next(line.split()[1] for line in text.splitlines() if line.startswith("ds4_requests_inflight")))
        time.sleep(0.05)
    client.join(30)
    assert seen == 1
