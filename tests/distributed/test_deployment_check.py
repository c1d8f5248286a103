"""A box's distributed part in the spec, and the check that the parts of one deployment fit together."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from pydantic import ValidationError

from ds4_converge.spec.deployment import Box, check
from ds4_converge.spec.layers import parse_layers
from ds4_converge.spec.model import Spec

COMMIT = "b030961" + "0" * 33
SHA = "ab" * 32


def spec(role: str, layers: str, *, commit: str = COMMIT, sha: str | None = SHA, port: int = 9000,
         coordinator: dict | None = None, listen: dict | None = None, ctx: int = 32768) -> Spec:
    part = {"role": role, "layers": layers, "listen": listen or {"host": "0.0.0.0", "port": port}}
    if role == "worker":
        part["coordinator"] = coordinator or {"host": "10.0.0.1", "port": 9000}
    return Spec.model_validate({
        "engine": {"repo": "https://example.invalid/ds4.git", "ref": "b030961", "commit": commit, "target": "cpu"},
        "model": {"main": {"source": "/srv/gguf/flash.gguf", "sha256": sha} if sha else "/srv/gguf/flash.gguf"},
        "server": {"ctx": ctx}, "distributed": part})


def pair(coordinator_layers="0:21", worker_layers="22:output", **worker) -> list[Box]:
    return [Box("spark-a", spec("coordinator", coordinator_layers)),
            Box("spark-b", spec("worker", worker_layers, port=9001, **worker))]


def test_layer_ranges_read_as_the_engine_reads_them():
    assert parse_layers("0:21").end == 21 and not parse_layers("0:21").has_output
    assert parse_layers("22:output").has_output and parse_layers("22:output").last(43) == 42
    for bad, words in [("21", "expected A:B or A:output"), ("1:2:3", "too many ':'"), ("x:3", "invalid start"),
                       ("3:y", "invalid end"), ("5:4", "end precedes start"), ("43:output", "starts past final"),
                       ("0:43", "ends past final model layer 42")]:
        with pytest.raises(ValueError, match=words):
            parse_layers(bad)


def test_a_pair_that_covers_every_layer_once_fits():
    assert check(pair()) == []
    three = [Box("a", spec("coordinator", "0:14")), Box("b", spec("worker", "15:29", port=9001)),
             Box("c", spec("worker", "30:output", port=9002))]
    assert check(three) == []


@pytest.mark.parametrize("coord, work, problem", [
    ("0:20", "22:output", "no box serves layer 21"),
    ("0:21", "20:output", "layers 20-21 (20:output) are served twice"),
    ("0:21", "22:40", "no box serves layers 41-42 (the model has 43 layers"),
    ("0:21", "22:42", "no box loads the output head"),
])
def test_gaps_overlaps_and_a_missing_head_are_named(coord, work, problem):
    assert any(problem in p for p in check(pair(coord, work))), check(pair(coord, work))


def test_one_coordinator_and_a_worker_that_reaches_it():
    assert any("exactly one coordinator, these specs have 2" in p
               for p in check([Box("a", spec("coordinator", "0:21")), Box("b", spec("coordinator", "0:21"))]))
    wrong = check(pair(coordinator={"host": "10.0.0.1", "port": 9100}))
    assert wrong == ["spark-b: reaches the coordinator at 10.0.0.1:9100, but spark-a listens on 0.0.0.0:9000"]


def test_every_box_runs_the_same_commit_and_model_by_digest():
    other = pair(commit="c" * 40)
    assert any("different engine commits" in p for p in check(other))
    unpinned = pair(sha=None)
    assert any("spark-b: no model.main.sha256" in p for p in check(unpinned))
    other_model = [Box("a", spec("coordinator", "0:21")), Box("b", spec("worker", "22:output", sha="cd" * 32,
                                                                         port=9001))]
    assert any("different model (model.main.sha256)s" in p for p in check(other_model))


def test_a_worker_with_a_smaller_context_than_its_coordinator_is_named():
    """On the H200 the real coordinator refused a worker with ctx 8192 when its own was 16384."""
    assert check(pair(ctx=65536)) == []
    assert check(pair(ctx=8192)) == ["spark-b: server.ctx 8192 is smaller than the coordinator's 32768 (spark-a); "
                                     "the coordinator refuses such a worker (\"worker context too small\")"]


def test_a_single_spec_checks_its_own_part():
    with pytest.raises(ValidationError, match="needs the coordinator's address"):
        Spec.model_validate({"engine": {"repo": "https://e.invalid/x.git", "ref": "v1", "target": "cpu"},
                             "model": {"main": "/m.gguf"},
                             "distributed": {"role": "worker", "layers": "22:output",
                                             "listen": {"host": "127.0.0.1", "port": 9001}}})
    with pytest.raises(ValidationError, match="must start at layer 0"):
        spec("coordinator", "1:21")
    with pytest.raises(ValidationError, match="takes no coordinator address"):
        Spec.model_validate({**spec("coordinator", "0:21").model_dump(exclude_none=True),
                             "distributed": {"role": "coordinator", "layers": "0:21",
                                             "listen": {"host": "0.0.0.0", "port": 9000},
                                             "coordinator": {"host": "x", "port": 1}}})
    with pytest.raises(ValidationError, match="is server.port"):
        spec("coordinator", "0:21", port=8000)
    with pytest.raises(ValidationError, match="ends past final model layer 42"):
        spec("worker", "22:43")


@pytest.mark.slow
def test_the_cli_says_what_does_not_fit(tmp_path):
    paths = []
    for name, (role, layers, port) in {"a": ("coordinator", "0:21", 9000), "b": ("worker", "23:output", 9001)}.items():
        data = spec(role, layers, port=port, coordinator={"host": "127.0.0.1", "port": 9000}).model_dump(
            mode="json", exclude_none=True)
        path = tmp_path / f"{name}.yaml"
        path.write_text(json.dumps(data))
        paths.append(str(path))
    run = subprocess.run([sys.executable, "-m", "ds4_converge.cli", "deployment-check", *paths, "--json"],
                         capture_output=True, text=True, timeout=60)
    document = json.loads(run.stdout)
    assert run.returncode == 1 and document["deployment"]["problems"] == ["no box serves layer 22"]
    paths[1] = paths[0]
    text = subprocess.run([sys.executable, "-m", "ds4_converge.cli", "deployment-check", *paths],
                          capture_output=True, text=True, timeout=60)
    assert text.returncode == 1 and "exactly one coordinator, these specs have 2" in text.stdout
