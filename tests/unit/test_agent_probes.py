"""The agent-readiness probes against a real HTTP server that misbehaves only where a single greedy smoke cannot
see it: under sampling at concurrency (speculation corrupting output), and with tools (DSML left as text)."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ds4_converge.health.probe import Unhealthy, smoke_test, speculative_test, tool_call_test
from ds4_converge.spec.model import Smoke

SMOKE = Smoke(prompt="What is the capital of France?", expect="Paris")
DSML = '<｜DSML｜tool_calls><｜DSML｜invoke name="get_weather"><｜DSML｜parameter name="city" string="true">Paris' \
       '</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜tool_calls>'


def serve(answer):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            data = json.dumps({"choices": [{"message": answer(body)}]}).encode()
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
    replies = iter([
        {"content": DSML},
        {"content": None, "tool_calls": [{"id": "c1", "type": "function",
                                          "function": {"name": "get_weather", "arguments": "city=Paris"}}]},
        {"content": None, "tool_calls": [{"id": "c1", "type": "function",
                                          "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
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
