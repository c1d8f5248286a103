"""One distributed deployment across boxes: do the specs of its boxes fit together?

Pure: the specs in, the problems out (empty: they fit). What is checked, and why:
- one coordinator, at least one worker, every box with a `distributed` part;
- every worker reaches the coordinator's listen port (and its host, unless the coordinator listens on all);
- the layer ranges cover every layer exactly once, from the coordinator's layer 0 to the output head (ds4's
  coordinator otherwise waits for ever: "route incomplete; next needed layer N");
- every box runs the same engine commit and the same model file, by digest: the workers exchange hidden states
  layer by layer, so another build or another quantisation would compute garbage, not fail;
- every worker's server.ctx is at least the coordinator's: the real coordinator refuses a smaller one at each
  connection ("coordinator error: worker context too small: worker=8192 coordinator=16384", seen on an H200),
  and the route stays incomplete.
"""
from __future__ import annotations

from dataclasses import dataclass

from ds4_converge.spec.layers import LayerRange, model_layers, parse_layers
from ds4_converge.spec.model import Spec

ANY_HOST = {"0.0.0.0", "::", "*"}


@dataclass(frozen=True)
class Box:
    name: str  # the spec file, or the inventory host
    spec: Spec


def check(boxes: list[Box], layers: int | None = None) -> list[str]:
    layers = model_layers() if layers is None else layers
    problems = [f"{b.name}: no distributed section (this box has no part in the deployment)"
                for b in boxes if b.spec.distributed is None]
    parts = [b for b in boxes if b.spec.distributed is not None]
    coordinators = [b for b in parts if b.spec.distributed.role == "coordinator"]
    workers = [b for b in parts if b.spec.distributed.worker]
    if len(coordinators) != 1:
        problems.append(f"a deployment has exactly one coordinator, these specs have {len(coordinators)}"
                        + (f" ({', '.join(b.name for b in coordinators)})" if coordinators else ""))
    if not workers:
        problems.append("a deployment needs at least one worker")
    if len(coordinators) == 1:
        problems += _addresses(coordinators[0], workers)
        problems += _contexts(coordinators[0], workers)
    problems += _coverage(parts, layers)
    problems += _same(boxes, "engine commit", _engine_commit)
    problems += _same(boxes, "model (model.main.sha256)", lambda s: s.model.main.sha256)
    return problems


def _addresses(coordinator: Box, workers: list[Box]) -> list[str]:
    listen = coordinator.spec.distributed.listen
    problems = []
    for w in workers:
        target = w.spec.distributed.coordinator
        if target.port != listen.port or (listen.host not in ANY_HOST and target.host != listen.host):
            problems.append(f"{w.name}: reaches the coordinator at {target}, but {coordinator.name} listens on "
                            f"{listen}")
    return problems


def _contexts(coordinator: Box, workers: list[Box]) -> list[str]:
    ctx = coordinator.spec.server.ctx
    return [f"{w.name}: server.ctx {w.spec.server.ctx} is smaller than the coordinator's {ctx} ({coordinator.name}); "
            f"the coordinator refuses such a worker (\"worker context too small\")"
            for w in workers if w.spec.server.ctx < ctx]


def _coverage(parts: list[Box], layers: int) -> list[str]:
    ranges: list[tuple[LayerRange, str]] = sorted(
        ((parse_layers(b.spec.distributed.layers), b.name) for b in parts), key=lambda r: r[0].start)
    problems = []
    next_layer = 0
    for rng, name in ranges:
        if rng.start > next_layer:
            problems.append(f"no box serves layer{'s' if rng.start - next_layer > 1 else ''} "
                            f"{_span(next_layer, rng.start - 1)}")
        elif rng.start < next_layer:
            problems.append(f"{name}: layers {_span(rng.start, min(next_layer, rng.last(layers) + 1) - 1)} "
                            f"({rng.text}) are served twice")
        next_layer = max(next_layer, rng.last(layers) + 1)
    if next_layer < layers:
        problems.append(f"no box serves layer{'s' if layers - next_layer > 1 else ''} {_span(next_layer, layers - 1)}"
                        f" (the model has {layers} layers, 0 to {layers - 1})")
    heads = [name for rng, name in ranges if rng.has_output]
    if not heads:
        problems.append(f"no box loads the output head: the range that ends at layer {layers - 1} is written "
                        f"A:output")
    elif len(heads) > 1:
        problems.append(f"the output head is loaded by {len(heads)} boxes ({', '.join(heads)}); one range ends at "
                        f"output")
    return problems


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


def _engine_commit(spec: Spec) -> str | None:
    ref = spec.engine.ref
    return spec.engine.commit or (ref if ref and len(ref) == 40 and all(c in "0123456789abcdef" for c in ref)
                                  else None)


def _same(boxes: list[Box], what: str, key) -> list[str]:
    values = {b.name: key(b.spec) for b in boxes}
    unpinned = [name for name, value in values.items() if value is None]
    if unpinned:
        field = "engine.commit (or a commit as engine.ref)" if what.startswith("engine") else "model.main.sha256"
        return [f"{', '.join(unpinned)}: no {field}; every box of a deployment pins the same {what}"]
    if len(set(values.values())) > 1:
        return [f"the boxes deploy different {what}s: " + ", ".join(f"{n} {v[:12]}" for n, v in values.items())]
    return []
