"""A real Prometheus (Debian's `prometheus`) on loopback, configured by the role's entry point `prometheus`,
scrapes a box behind its front door (HAProxy's exporter) and the box's textfiles (through a real
prometheus-node-exporter) while a client asks all the time, through an upgrade and a wrong-answer revert: the
requests are counted per release, the revert's alert is pending, status --json, the textfile and Prometheus give
the same release-to-slot map, and every query of the shipped Grafana dashboard finds series.

Cheap on 2 cores: one box on the simulated engine, scraped and evaluated every second."""
from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from ds4_converge.facts import programs
from boxes import FRONT_KEY, REPO, Box, free_port, two_free_ports, with_front

import prometheus_playbook

NODE_EXPORTER = "prometheus-node-exporter"
pytestmark = pytest.mark.skipif(
    programs.haproxy() is None or not all(shutil.which(tool) for tool in ("prometheus", NODE_EXPORTER)),
    reason="needs haproxy, prometheus and prometheus-node-exporter (Debian packages; .ci/system-deps.sh)")

DASHBOARD = REPO / "roles" / "ds4_converge" / "files" / "grafana" / "ds4-converge-dashboard.json"
QUESTION = {"model": "deepseek-chat", "max_tokens": 8, "messages": [{"role": "user", "content": "Capital of France?"}]}
BOUND_S = 45  # every wait for Prometheus to see something: scrapes and rules run every second


def ports(box: Box, count: int) -> list[int]:
    taken = {box.port, box.port + 1, box.front_port, box.metrics_port}
    found = []
    while len(found) < count:
        port = free_port()
        if port not in taken:
            taken.add(port)
            found.append(port)
    return found


def role_config(box: Box, directory: Path, node_port: int) -> Path:
    """prometheus.yml, the rules and the dashboard as the role writes them for an inventory of this one box."""
    return prometheus_playbook.run({"spark1": {"ansible_host": "127.0.0.1", "ds4_converge_node_exporter_port": node_port,
                                               "ds4_converge_spec": box.spec}},
                                   directory, "ds4_converge_prometheus_scrape_interval=1s")


@contextlib.contextmanager
def process(argv: list[str], log: Path):
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


class Prometheus:
    def __init__(self, port: int):
        self.url, self.started = f"http://127.0.0.1:{port}", time.time()

    def get(self, path: str, **params):
        answer = requests.get(f"{self.url}{path}", params=params, timeout=10)
        answer.raise_for_status()
        return answer.json()["data"]

    def query(self, expr: str) -> list[dict]:
        return self.get("/api/v1/query", query=expr)["result"]

    def query_range(self, expr: str, start: float, step: int = 2) -> list[dict]:
        """Evaluated every `step` s from about `start` to now (included: a series scraped a moment ago counts)."""
        end = time.time()
        start = end - step * math.ceil((end - start) / step)
        return self.get("/api/v1/query_range", query=expr, start=start, end=end, step=step)["result"]

    def alerts(self) -> list[dict]:
        return self.get("/api/v1/alerts")["alerts"]

    def wait(self, what: str, found, bound_s: float = BOUND_S):
        deadline = time.monotonic() + bound_s
        while True:
            try:
                result = found()
            except requests.RequestException:
                result = None
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"Prometheus did not show {what} within {bound_s} s")
            time.sleep(0.5)


class Client(threading.Thread):
    """Asks through the front door all the time; counts answers by status."""

    def __init__(self, box: Box):
        super().__init__(daemon=True)
        self.box, self.done, self.codes = box, threading.Event(), []

    def run(self):
        while not self.done.is_set():
            try:
                self.codes.append(requests.post(f"http://127.0.0.1:{self.box.front_port}/v1/chat/completions",
                                                json=QUESTION, timeout=60,
                                                headers={"Authorization": f"Bearer {FRONT_KEY}"}).status_code)
            except requests.RequestException as exc:
                self.codes.append(repr(exc))
            time.sleep(0.1)

    def stop(self):
        self.done.set()
        self.join(timeout=90)


@pytest.fixture(scope="module")
def watched(tmp_path_factory, sim_repo):
    base = tmp_path_factory.mktemp("watched")
    box = with_front(Box(base / "root", sim_repo, two_free_ports()))
    rc, document = box.converge()
    assert rc == 0, document.get("error")
    node_port, prom_port = ports(box, 2)
    config = role_config(box, base, node_port)
    node = [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{node_port}", "--collector.disable-defaults",
            "--collector.textfile", f"--collector.textfile.directory={box.root / 'metrics'}", "--collector.meminfo"]
    server = ["prometheus", f"--config.file={config / 'prometheus.yml'}", f"--storage.tsdb.path={base / 'tsdb'}",
              f"--web.listen-address=127.0.0.1:{prom_port}", "--storage.tsdb.retention.time=1h"]
    try:
        with process(node, base / "node-exporter.log"), process(server, base / "prometheus.log"):
            prometheus = Prometheus(prom_port)
            prometheus.wait("both targets up", lambda: len(prometheus.query("up == 1")) == 2)
            yield box, prometheus
    finally:
        box.stop()


def slot_info_in_textfile(box: Box) -> dict:
    text = (box.root / "metrics" / "ds4_converge_front.prom").read_text()
    return {s.labels["server"]: s.labels["release"] for f in text_string_to_metric_families(text)
            if f.name == "ds4_converge_front_slot_info" for s in f.samples}


def per_release(prometheus: Prometheus, start: float) -> dict:
    """{release: the most answers per second it gave in the test's window} from the recording rule."""
    results = prometheus.query_range(
        'sum by (release) (box_release:haproxy_server_http_responses:rate1m{box="spark1", code="2xx"})', start)
    return {r["metric"]["release"]: max(float(v) for _, v in r["values"]) for r in results}


def test_requests_are_counted_per_release_through_an_upgrade_and_a_revert_raises_its_alert(watched):
    box, prometheus = watched
    start = time.time() - 60
    first = box.status()["release"]
    client = Client(box)
    client.start()
    try:
        prometheus.wait(f"answers of {first}", lambda: per_release(prometheus, start).get(first, 0) > 0)
        box.spec["engine"]["ref"] = "v0.3.0"  # the upgrade stays: the tests below start from it
        box.write()
        rc, upgraded = box.converge()
        assert rc == 0, upgraded.get("error")
        second = upgraded["release"]
        assert second != first
        prometheus.wait(f"answers of {second}", lambda: per_release(prometheus, start).get(second, 0) > 0)

        # one map: status --json, the textfile, and the series Prometheus scraped from it
        slots = {slot["server"]: slot["release"] for slot in box.status()["front"]["slots"]}
        assert slots == slot_info_in_textfile(box), slots
        assert second in slots.values(), slots
        scraped = lambda: {r["metric"]["server"]: r["metric"]["release"]  # noqa: E731
                           for r in prometheus.query('ds4_converge_front_slot_info{box="spark1"}')}
        prometheus.wait("the slot map as status says it", lambda: scraped() == slots)

        with box.edited({"engine.ref": "v0.3.1-wrong-answer"}):  # answers "London": reverted
            rc, reverted = box.converge()
        assert rc == 1 and reverted["reverted"], reverted.get("error")
        wrong = reverted["switch"]["to"]
        pending = prometheus.wait("the revert's alert pending", lambda: [
            a for a in prometheus.alerts() if a["labels"]["alertname"] == "Ds4LastConvergeFailed"
            and a["labels"]["box"] == "spark1" and a["labels"]["command"] == "converge"])
        assert pending[0]["state"] == "pending", pending  # `for: 10m`: pending, not firing yet
        time.sleep(2)
    finally:
        client.stop()
    assert client.codes.count(200) > 20 and set(client.codes) == {200}, set(client.codes)
    counted = per_release(prometheus, start)
    assert counted[first] > 0 and counted[second] > 0, counted
    # a release that fails its probe never answers a client: it has no series at all
    assert not [release for release in counted if release not in (first, second)], (wrong, counted)
    # the old release's numbers stay readable after the switch
    assert prometheus.query_range(f'box_release:haproxy_server_http_responses:rate1m{{release="{first}"}}', start)


def test_a_hold_longer_than_half_of_hold_s_raises_its_alert(watched):
    """front.overlap off: the serving engine stops first and the front door holds requests while the new one
    loads (10 s here) and is probed; with hold_s 16 the hold passes hold_s / 2 = 8 s, and the alert, which reads
    HAProxy's hold server and the textfile's hold_s, fires while requests wait."""
    box, prometheus = watched
    start = time.time()
    serving = box.status()["release"]
    with box.edited({"front.overlap": "off", "front.hold_s": 16}):
        rc, document = box.converge()  # the front door's settings only: HAProxy reloaded, no switch
        assert rc == 0 and document["switch"] is None and document["release"] == serving, document.get("error")
        prometheus.wait("hold_s 16", lambda: prometheus.query("ds4_converge_front_hold_seconds == 16"))
        client = Client(box)
        client.start()
        try:
            with box.edited({"engine.ref": "v0.2.0", "server.env": {"DS4_SIM_LOAD_SECONDS": "10"}}):
                rc, document = box.converge()
                assert rc == 0 and document["switch"], document.get("error")
        finally:
            client.stop()
    assert set(client.codes) == {200}, set(client.codes)  # held, never refused
    fired = prometheus.query_range('ALERTS{alertname="Ds4RequestsHeldTooLong", alertstate="firing", box="spark1"}',
                                   start, step=1)
    assert fired, "Ds4RequestsHeldTooLong never fired"
    held = prometheus.query_range('max(haproxy_server_status{box="spark1", server="hold", state="UP"})', start, step=1)
    assert any(float(v) == 1 for _, v in held[0]["values"])
    prometheus.wait("the alert resolved once the switch committed",
                    lambda: not prometheus.query('ALERTS{alertname="Ds4RequestsHeldTooLong"}'))


def test_every_query_of_the_dashboard_finds_series_prometheus_scraped(watched):
    box, prometheus = watched
    start = time.time() - 600
    # a bench record for the tokens/s panel; status writes the textfile again with it
    bench = box.cli("bench", str(box.spec_path), "--prompt-tokens", "300", "--concurrency", "1", "--reps", "1")
    assert bench.returncode == 0, bench.stdout + bench.stderr
    assert box.cli("status", str(box.spec_path)).returncode == 0
    prometheus.wait("the bench's tok/s", lambda: prometheus.query("ds4_converge_bench_decode_tokens_per_second"))
    document = json.loads(DASHBOARD.read_text())
    empty = []
    for panel in document["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$box", ".*")
            if not prometheus.query_range(expr, start):
                empty.append((panel["title"], expr))
    assert not empty, empty
    if os.environ.get("DS4_DASHBOARD_PICTURE"):  # docs/observability-dashboard.png, drawn from this Prometheus
        import importlib.util

        spec = importlib.util.spec_from_file_location("picture", REPO / "observability" / "picture.py")
        picture = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(picture)
        picture.draw(prometheus.url, document, os.environ["DS4_DASHBOARD_PICTURE"], minutes=(time.time() - prometheus.started) / 60)


def test_a_front_door_removed_takes_its_slot_series_with_it(watched):
    box, prometheus = watched
    assert prometheus.query('ds4_converge_front_slot_info{box="spark1"}')
    front = box.spec.pop("front")
    box.write()
    try:
        rc, document = box.converge()
        assert rc == 0, document.get("error")
        assert not (box.root / "metrics" / "ds4_converge_front.prom").exists()
        prometheus.wait("the slot series gone", lambda: not prometheus.query('ds4_converge_front_slot_info'))
    finally:
        box.spec["front"] = front
        box.write()
