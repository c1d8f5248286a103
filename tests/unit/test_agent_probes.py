"""The agent-readiness probes against a real HTTP server that misbehaves only where a single greedy smoke cannot
see it: under sampling at concurrency (speculation corrupting output), and with tools (DSML left as text)."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ds4_converge.health.probe import (Unhealthy, smoke_test, speculative_test, streamed_smoke_test,
                                       tool_call_test)
from ds4_converge.spec.model import Smoke

SMOKE = Smoke(prompt="What is the capital of France?", expect="Paris")
DSML = '<｜DSML｜tool_calls><｜DSML｜invoke name="get_weather"><｜DSML｜parameter name="city" string="true">Paris' \
       '</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜tool_calls>'


def events(message: dict) -> bytes:
    """`message` as an OpenAI chat stream: the content in two deltas, each tool call's name then arguments."""
    content = message.get("content") or ""
    deltas = [{"role": "assistant", "content": ""}, {"content": content[:3]}, {"content": content[3:]}]
    for i, call in enumerate(message.get("tool_calls") or []):
        deltas += [{"tool_calls": [{"index": i, "function": {"name": call["function"]["name"], "arguments": ""}}]},
                   {"tool_calls": [{"index": i, "function": {"arguments": call["function"]["arguments"]}}]}]
    chunks = [{"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def serve(answer):
    """A server answering every chat completion with answer(body): a message, streamed when the body asks."""
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            message = answer(body)
            data = events(message) if body.get("stream") else json.dumps({"choices": [{"message": message}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_output_corrupted_only_when_sampled_is_caught_by_the_speculative_probe():
    seen = []

    def answer(body):
        seen.append(body["temperature"])
        return {"content": "Paris." if body["temperature"] == 0 else "<｜begin▁of▁sentence｜>Par Par"}

    server, endpoint = serve(answer)
    try:
        smoke_test(endpoint, SMOKE, timeout=5)  # the greedy smoke passes
        with pytest.raises(Unhealthy, match="with speculation on, 4 of 4 smoke requests at concurrency 2 and "
                                            "temperature 0.7 went wrong"):
            speculative_test(endpoint, SMOKE, timeout=5)
    finally:
        server.shutdown()
    assert seen.count(0.7) == 4


def test_a_tool_call_must_be_structured_with_json_arguments():
    good = {"content": None, "tool_calls": [{"id": "c1", "type": "function",
                                             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}
    replies = iter([
        {"content": DSML},
        {"content": None, "tool_calls": [{"id": "c1", "type": "function",
                                          "function": {"name": "get_weather", "arguments": "city=Paris"}}]},
        good, good,  # asked plain, then streamed
    ])
    bodies = []

    def answer(body):
        bodies.append(body)
        return next(replies)

    server, endpoint = serve(answer)
    try:
        with pytest.raises(Unhealthy, match=r"the answer is DSML as text \(the runtime did not parse it\)"):
            tool_call_test(endpoint, timeout=5)
        with pytest.raises(Unhealthy, match="the arguments are not a JSON object: 'city=Paris'"):
            tool_call_test(endpoint, timeout=5)
        assert tool_call_test(endpoint, timeout=5)["function"]["name"] == "get_weather"
    finally:
        server.shutdown()
    assert bodies[0]["tools"][0]["function"]["name"] == "get_weather"


def test_an_answer_right_when_asked_plain_but_empty_when_streamed_is_unhealthy():
    """Agents stream: a release whose streamed answers carry nothing in `content` (the words only in
    `reasoning_content`, or nowhere) fails the streamed smoke and the streamed tool call, not only the plain ones."""
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}

    def answer(body):
        if body.get("stream"):
            return {"content": ""}
        return {"content": None, "tool_calls": [call]} if body.get("tools") else {"content": "Paris."}

    server, endpoint = serve(answer)
    try:
        smoke_test(endpoint, SMOKE, timeout=5)  # plain, it passes
        with pytest.raises(Unhealthy, match=r"streamed smoke answer '' \(its `content`\) does not contain 'Paris'"):
            streamed_smoke_test(endpoint, SMOKE, timeout=5)
        with pytest.raises(Unhealthy, match="streamed tool-call smoke: the answer is empty: no tool_calls, no content"):
            tool_call_test(endpoint, timeout=5)
    finally:
        server.shutdown()
    server, endpoint = serve(lambda body: {"content": "Paris."})
    try:
        assert streamed_smoke_test(endpoint, SMOKE, timeout=5) == "Paris."
    finally:
        server.shutdown()
