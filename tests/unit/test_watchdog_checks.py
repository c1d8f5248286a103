"""The watchdog's checks over real HTTP on loopback (a tiny server answering as told): each names itself and
its own timeout; a 503 with Retry-After (the fork's admission control) is a busy refusal, a 500 a failure."""
import http.server
import threading
import time

import pytest

from ds4_converge.service.watchdog import COMPLETION_TIMEOUT_S, Settings, check_completion, check_models


@pytest.fixture
def engine():
    """A server whose answer the test sets: (status, headers, body, delay_s)."""
    answer = {"models": (200, {}, '{"data":[{"id":"m"}]}', 0), "chat": (200, {}, "{}", 0)}

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _answer(self, key):
            status, headers, body, delay = answer[key]
            time.sleep(delay)
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def do_GET(self):
            self._answer("models")

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self._answer("chat")

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield answer, Settings(name="ds4", endpoint=f"http://127.0.0.1:{server.server_port}", model="m", interval_s=0.5,
                           completion_every_s=1, failures=2, backoff_max_s=4, deadline_s=10)
    server.shutdown()
    server.server_close()


def test_each_check_answers_for_itself(engine):
    answer, settings = engine
    assert check_models(settings).passed and check_completion(settings).passed
    answer["chat"] = (500, {}, '{"error":{"message":"session state corrupted"}}', 0)
    failed = check_completion(settings)
    assert not failed.passed and not failed.busy_refusal and failed.why == "a one-token completion answered HTTP 500"
    answer["chat"] = (503, {"Retry-After": "2"}, "{}", 0)
    refused = check_completion(settings)
    assert refused.busy_refusal and refused.why == "a one-token completion answered HTTP 503, Retry-After 2"
    answer["chat"] = (503, {}, "{}", 0)  # without Retry-After: not a typed refusal
    assert not check_completion(settings).busy_refusal
    answer["models"] = (200, {}, '{"data":[{"id":"other"}]}', 0)
    assert check_models(settings).why == "/v1/models does not list m"
    answer["models"] = (200, {}, "{}", 1.5)
    late = check_models(settings)
    assert late.timed_out and late.why == "/v1/models did not answer within 1s"  # its own timeout, not 60 s
    assert settings.models_timeout_s == 1 and COMPLETION_TIMEOUT_S == 60
