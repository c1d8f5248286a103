"""The HTTP API of a running ds4-server (real process, real sockets)."""

import json
import re
import socket

import pytest
import requests

from engine_sim_support import MODELS, Proc, clean_env, free_port


def _server(binary, tmp_path_factory, *args):
    d = tmp_path_factory.mktemp("srv")
    port = free_port()
    p = Proc(binary, ["-m", MODELS / "tiny-ds4flash.gguf", "--port", port, "-c", "16384", "-n", "100000"]
             + list(args), clean_env(DS4_LOCK_FILE=d / "ds4.lock"), d / "server.log")
    assert p.wait_for("listening on http://127.0.0.1:%d" % port), p.log()
    return p, "http://127.0.0.1:%d" % port


@pytest.fixture(scope="module")
def up(upstream, tmp_path_factory):
    p, url = _server(upstream, tmp_path_factory)
    yield url
    assert p.stop() == 0


@pytest.fixture(scope="module")
def fk(fork, tmp_path_factory):
    p, url = _server(fork, tmp_path_factory, "--cors")
    yield url
    assert p.stop() == 0


def chat(url, content, **kw):
    body = {"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": content}]}
    body.update(kw)
    r = requests.post(url + "/v1/chat/completions", json=body, timeout=20)
    return r


def sse(r):
    events = []
    for line in r.iter_lines(decode_unicode=True):
        if line and line.startswith("data: "):
            events.append(line[6:])
    return events


def test_models_shape(up):
    r = requests.get(up + "/v1/models", timeout=5)
    assert r.status_code == 200
    assert r.headers["Connection"] == "close"
    assert r.headers["Content-Type"].startswith("application/json")
    body = r.json()
    assert body["object"] == "list" and len(body["data"]) == 1
    m = body["data"][0]
    assert m == {
        "id": "deepseek-v4-flash", "object": "model", "created": 1767225600, "owned_by": "ds4.c",
        "name": "DeepSeek V4 Flash", "context_length": 16384,
        "top_provider": {"context_length": 16384, "max_completion_tokens": 16384, "is_moderated": False},
        "supported_parameters": ["tools", "tool_choice", "max_tokens", "temperature", "top_p", "top_k",
                                 "min_p", "stop", "seed", "stream", "reasoning_effort"]}
    one = requests.get(up + "/v1/models/deepseek-v4-flash?x=1", timeout=5)
    assert one.status_code == 200 and one.json() == m
    assert requests.get(up + "/v1/models/gpt-4", timeout=5).status_code == 404


@pytest.mark.parametrize("path", ["/health", "/", "/v1/stats", "/metrics"])
def test_unknown_endpoints_404_upstream(up, path):
    r = requests.get(up + path, timeout=5)
    assert r.status_code == 404
    assert r.json()["error"]["message"] == "unknown endpoint"
    assert r.headers["Connection"] == "close"


def test_options_204_and_malformed_400(up, fk):
    r = requests.options(up + "/v1/chat/completions", timeout=5)
    assert r.status_code == 204
    assert "Access-Control-Allow-Origin" not in r.headers
    assert requests.options(fk + "/v1/models", timeout=5).headers["Access-Control-Allow-Origin"] == "*"
    r = requests.post(up + "/v1/chat/completions", data="{not json", timeout=5,
                      headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    assert "error" in r.json()


def test_raw_http_one_request_per_connection(up):
    host, port = up[len("http://"):].split(":")
    s = socket.create_connection((host, int(port)), timeout=5)
    s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    assert data.startswith(b"HTTP/1.1 200")
    assert data.count(b"HTTP/1.1 ") == 1
    assert b"Server:" not in data


def test_chat_thinking_off_answers_paris(up):
    for extra in ({"think": False}, {"thinking": {"type": "disabled"}}, {"reasoning_effort": "none"},
                  {"model": "deepseek-chat"}):
        r = chat(up, "What is the capital of France? Answer in one word.", max_tokens=64, **extra)
        assert r.status_code == 200
        b = r.json()
        msg = b["choices"][0]["message"]
        assert "Paris" in msg["content"], (extra, b)
        assert "reasoning_content" not in msg
        assert b["choices"][0]["finish_reason"] == "stop"
        assert b["object"] == "chat.completion"
        assert b["model"] == extra.get("model", "deepseek-v4-flash")
        u = b["usage"]
        assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
        assert "cached_tokens" in u["prompt_tokens_details"]
        assert "timings" not in b  # upstream


def test_chat_thinking_on_by_default(up):
    b = chat(up, "What is the capital of France?").json()
    msg = b["choices"][0]["message"]
    assert msg["reasoning_content"]
    assert "Paris" in msg["content"] and "Paris" not in msg["reasoning_content"]
    other = chat(up, "Tell me a joke", think=False).json()["choices"][0]["message"]["content"]
    assert other and "Paris" not in other
    assert other == chat(up, "Tell me a joke", think=False).json()["choices"][0]["message"]["content"]


def test_max_tokens_cut_gives_length(up):
    b = chat(up, "What is the capital of France?", max_tokens=3).json()
    assert b["choices"][0]["finish_reason"] == "length"
    assert b["usage"]["completion_tokens"] <= 3


def test_stream_chat_chunks_and_done(up):
    r = requests.post(up + "/v1/chat/completions", stream=True, timeout=20, json={
        "messages": [{"role": "user", "content": "What is the capital of France?"}], "stream": True})
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/event-stream")
    assert r.headers["Connection"] == "close"
    events = sse(r)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    reasoning = "".join(c["choices"][0]["delta"].get("reasoning_content", "") for c in chunks)
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert reasoning and "Paris" in content
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert not any("usage" in c for c in chunks)


def test_stream_include_usage(up, fk):
    for url, has_timings in ((up, False), (fk, True)):
        r = requests.post(url + "/v1/chat/completions", stream=True, timeout=20, json={
            "messages": [{"role": "user", "content": "hi"}], "stream": True, "think": False,
            "stream_options": {"include_usage": True}})
        events = sse(r)
        assert events[-1] == "[DONE]"
        last = json.loads(events[-2])
        assert last["choices"] == [] and last["usage"]["completion_tokens"] > 0
        assert ("timings" in last) == has_timings


def test_tool_call_parsed(up):
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    b = chat(up, "Please call get_weather for city: Lyon", tools=tools, think=False).json()
    ch = b["choices"][0]
    assert ch["finish_reason"] == "tool_calls"
    (tc,) = ch["message"]["tool_calls"]
    assert re.fullmatch(r"call_[0-9a-f]{32}", tc["id"])
    assert tc["type"] == "function"
    assert tc["function"]["name"] == "get_weather"
    assert json.loads(tc["function"]["arguments"]) == {"city": "Lyon"}
    assert "DSML" not in json.dumps(b)
    # no tools offered -> plain answer; tool result -> plain answer
    assert chat(up, "Please call get_weather for city: Lyon", think=False).json()[
        "choices"][0]["finish_reason"] == "stop"
    msgs = [{"role": "user", "content": "weather in Lyon? use the tool"},
            {"role": "assistant", "content": None, "tool_calls": [tc]},
            {"role": "tool", "tool_call_id": tc["id"], "content": "sunny, 21C"}]
    r = requests.post(up + "/v1/chat/completions", json={"messages": msgs, "tools": tools, "think": False},
                      timeout=20).json()
    assert r["choices"][0]["finish_reason"] == "stop"
    assert "sunny" in r["choices"][0]["message"]["content"]


def test_tool_call_streamed(up):
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}}}}]
    r = requests.post(up + "/v1/chat/completions", stream=True, timeout=20, json={
        "messages": [{"role": "user", "content": "use the lookup tool, q: ds4, n: 3"}],
        "tools": tools, "stream": True})
    chunks = [json.loads(e) for e in sse(r)[:-1]]
    calls = [c["choices"][0]["delta"]["tool_calls"] for c in chunks if "tool_calls" in c["choices"][0]["delta"]]
    assert calls[0][0]["function"]["name"] == "lookup"
    args = "".join(c[0]["function"].get("arguments", "") for c in calls)
    assert json.loads(args) == {"q": "ds4", "n": 3}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_completions_endpoint(up):
    r = requests.post(up + "/v1/completions", timeout=20, json={
        "prompt": "The capital of France is", "max_tokens": 32, "think": False}).json()
    assert r["object"] == "text_completion"
    assert "Paris" in r["choices"][0]["text"]
    r = requests.post(up + "/v1/completions", stream=True, timeout=20, json={
        "prompt": "What is the capital of France?", "stream": True})
    ev = sse(r)
    assert ev[-1] == "[DONE]"
    assert "Paris" in "".join(json.loads(e)["choices"][0]["text"] for e in ev[:-1])


def test_context_length_exceeded(up):
    r = chat(up, "word " * 17000)
    assert r.status_code == 400
    e = r.json()["error"]
    assert e["code"] == "context_length_exceeded" and e["n_ctx"] == 16384


def test_prefix_reuse_reports_cached_tokens(up):
    first = [{"role": "user", "content": "Remember the number 7. " * 20}]
    requests.post(up + "/v1/chat/completions", json={"messages": first, "think": False}, timeout=20)
    more = first + [{"role": "assistant", "content": "OK."}, {"role": "user", "content": "Which number?"}]
    b = requests.post(up + "/v1/chat/completions", json={"messages": more, "think": False}, timeout=20).json()
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] > 100
    b = chat(up, "Something unrelated entirely", think=False).json()
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] < 10


def test_anthropic_and_responses(up):
    r = requests.post(up + "/v1/messages", timeout=20, json={
        "model": "x", "max_tokens": 100, "messages": [{"role": "user", "content": "capital of France?"}]}).json()
    assert r["type"] == "message" and r["stop_reason"] == "end_turn"
    assert r["content"][0]["type"] == "thinking"
    assert "Paris" in r["content"][-1]["text"]
    r = requests.post(up + "/v1/responses", timeout=20, json={"input": "capital of France?"}).json()
    assert r["status"] == "completed"
    assert "Paris" in r["output"][-1]["content"][0]["text"]


def test_fork_timings_metrics(fk):
    b = chat(fk, "What is the capital of France?", think=False).json()
    t = b["timings"]
    assert set(t) >= {"ttft_ms", "prefill_tokens", "prefill_cached_tokens", "prefill_tok_s", "decode_tok_s"}
    assert t["ttft_ms"] > 0 and t["decode_tok_s"] > 0
    assert t["prefill_tokens"] + t["prefill_cached_tokens"] == b["usage"]["prompt_tokens"]
    m = requests.get(fk + "/metrics", timeout=5)
    assert m.status_code == 200 and m.headers["Content-Type"].startswith("text/plain")
    assert re.search(r"^ds4_uptime_seconds \d+(\.\d+)?$", m.text, re.M)
    ok = re.search(r'^ds4_requests_total\{outcome="ok"\} (\d+)$', m.text, re.M)
    assert ok and int(ok.group(1)) >= 1
    assert requests.get(fk + "/v1/stats", headers={"Accept": "application/json"}, timeout=5).json()["ctx"] == 16384
    assert requests.get(fk + "/health", timeout=5).status_code == 404
