"""The release each slot of the front door serves (service/front.py slot_map), through both roads of a switch,
and the series that carries it to Prometheus."""
from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ds4_converge.core.state import Deployment
from ds4_converge.orchestrate.context import make_context
from ds4_converge.service import front
from ds4_converge.spec.loader import LoadedSpec
from fakehost import spec

PORT = 8001


@pytest.fixture
def ctx(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("k\n")
    loaded = LoadedSpec(spec(paths={"root": str(tmp_path / "root")}, server={"port": PORT, "name": "ds4"},
                             front={"port": 8000, "keys": str(keys), "hold_s": 40}), tmp_path / "spec.yaml")
    return make_context(loaded, say=lambda *_: None)


def deployment(release: str, port: int) -> Deployment:
    return Deployment(release=release, program_conf=f"[program:ds4] ; {release} {port}", command=["ds4-server"],
                      endpoint=f"http://127.0.0.1:{port}")


def releases(ctx, candidate: Deployment | None = None) -> dict:
    return {slot["server"]: slot["release"] for slot in front.slot_map(ctx, candidate)}


def test_before_any_release_no_slot_has_one(ctx):
    assert front.slot_map(ctx) == [{"server": "a", "port": PORT, "release": None},
                                   {"server": "b", "port": PORT + 1, "release": None}]


def test_the_stop_first_road_the_new_release_on_the_idle_slot_and_the_old_one_keeps_its_slot(ctx):
    old = deployment("v0.3.0", PORT)
    ctx.state.bless(old)
    assert releases(ctx) == {"a": "v0.3.0", "b": None}
    ctx.state.current = deployment("v0.3.1", PORT + 1)  # switched: the front door flips to b at the commit
    assert releases(ctx) == {"a": "v0.3.0", "b": "v0.3.1"}
    front.write_textfile(ctx)
    ctx.state.bless(ctx.state.current)
    assert releases(ctx) == {"a": "v0.3.0", "b": "v0.3.1"}


def test_beside_the_candidate_has_its_slot_then_the_new_release_moves_to_the_slot_clients_know(ctx):
    ctx.state.bless(deployment("v0.3.0", PORT))
    candidate = deployment("v0.3.1", PORT + 1)  # the switch's candidate, program ds4.next
    assert releases(ctx, candidate) == {"a": "v0.3.0", "b": "v0.3.1"}  # clients move to the candidate
    front.write_textfile(ctx, candidate)
    ctx.state.current = deployment("v0.3.1", PORT)  # last good stopped, the new release under ds4 on slot a
    assert releases(ctx, candidate) == {"a": "v0.3.1", "b": "v0.3.1"}
    ctx.state.bless(ctx.state.current)
    front.write_textfile(ctx)
    # the candidate's slot keeps its release: its counters, which no longer move, stay v0.3.1's
    assert releases(ctx) == {"a": "v0.3.1", "b": "v0.3.1"}
    ctx.state.current = deployment("v0.3.2", PORT + 1)
    assert releases(ctx) == {"a": "v0.3.1", "b": "v0.3.2"}


def test_a_damaged_map_file_falls_back_to_the_good_history(ctx):
    ctx.state.bless(deployment("v0.3.0", PORT))
    front.write_textfile(ctx)
    (ctx.layout.root / "front" / "slots.json").write_text("[{\"server\": 1")
    assert releases(ctx) == {"a": "v0.3.0", "b": None}


def test_the_series_joins_haproxy_s_labels_and_carries_hold_s(ctx):
    ctx.state.bless(deployment("v0.3.0", PORT))
    families = {f.name: f for f in text_string_to_metric_families(front.metrics_text(ctx))}
    [slot] = families["ds4_converge_front_slot_info"].samples
    assert slot.labels == {"root": str(ctx.layout.root), "proxy": "ds4-engine", "server": "a", "port": str(PORT),
                           "release": "v0.3.0"} and slot.value == 1
    [hold] = families["ds4_converge_front_hold_seconds"].samples
    assert hold.value == 40 and hold.labels["proxy"] == "ds4-engine"
