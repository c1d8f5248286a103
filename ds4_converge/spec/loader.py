"""Read a spec file: YAML with positions, `--set` overrides, validation errors as FILE:LINE:COL."""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from ds4_converge.spec.model import FieldProblem, Spec
from ds4_converge.errors import Ds4Error

Loc = tuple  # a path of keys and list indexes
# libyaml's parser when PyYAML has it (same safe loading, same marks): the pure-Python one is slow to start
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SpecInvalid(Ds4Error):
    """The spec cannot be used; `problems` are ready-to-print FILE:LINE:COL lines."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class LoadedSpec:
    spec: Spec
    path: Path

    @property
    def base_dir(self) -> Path:
        """Relative paths in a spec are relative to the spec file, not to the caller's cwd."""
        return self.path.parent


def load_spec(path: str | Path, overrides: list[str] = ()) -> LoadedSpec:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecInvalid([f"{path}: cannot read spec: {exc.strerror}"]) from None
    try:
        node = yaml.compose(text, Loader=SAFE_LOADER)
        data = yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise SpecInvalid([f"{where}: invalid YAML: {getattr(exc, 'problem', exc)}"]) from None
    if not isinstance(data, dict):
        raise SpecInvalid([f"{path}:1:1: the spec must be a mapping with engine, model, server …"])
    positions = _positions(node)
    set_locs = {}
    for item in overrides:
        loc = apply_override(data, item, path)
        set_locs[loc] = item
    try:
        return LoadedSpec(Spec.model_validate(data), path.resolve())
    except ValidationError as exc:
        raise SpecInvalid([_describe(err, path, positions, set_locs) for err in exc.errors()]) from None


def apply_override(data: dict, item: str, path: Path) -> Loc:
    """`--set server.ctx=65536`: the value is read as YAML, like helm's --set."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise SpecInvalid([f"--set {item}: expected dotted.key=value"])
    loc = tuple(key.split("."))
    target = data
    for part in loc[:-1]:
        nxt = target.setdefault(part, {})
        if not isinstance(nxt, dict):
            raise SpecInvalid([f"--set {item}: {part} is not a mapping in {path}"])
        target = nxt
    try:
        target[loc[-1]] = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError:
        target[loc[-1]] = raw
    return loc


def _positions(node, loc: Loc = ()) -> dict[Loc, tuple[int, int]]:
    """Map every key path to the (line, column) of its value, and `loc + ("<key>",)` to the key itself."""
    found = {loc: (node.start_mark.line + 1, node.start_mark.column + 1)}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            found[loc + (key, "<key>")] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            found.update(_positions(value_node, loc + (key,)))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            found.update(_positions(item, loc + (index,)))
    return found


def _describe(err: dict, path: Path, positions: dict, set_locs: dict) -> str:
    loc = tuple(err["loc"])
    problem = (err.get("ctx") or {}).get("error")
    if isinstance(problem, FieldProblem):
        loc = loc + problem.path
        message = str(problem)
    elif err["type"] == "extra_forbidden":
        message = "unknown key" + _nearest(loc)
    elif err["type"] == "missing":
        message = "required"
    else:
        message = err["msg"].removeprefix("Value error, ")
        if "input" in err and not isinstance(err["input"], (dict, list)):
            message += f" (got {json.dumps(err['input'], default=str)})"
    field = ".".join(str(p) for p in loc) or "(top)"
    for set_loc, item in set_locs.items():
        if loc[: len(set_loc)] == set_loc:
            return f"--set {item}: {field}: {message}"
    key_pos = positions.get(loc[:-1] + (loc[-1], "<key>")) if loc else None
    line, col = key_pos or _nearest_position(loc, positions)
    return f"{path}:{line}:{col}: {field}: {message}"


def _nearest_position(loc: Loc, positions: dict) -> tuple[int, int]:
    while loc and loc not in positions:
        loc = loc[:-1]
    return positions.get(loc, (1, 1))


def _nearest(loc: Loc) -> str:
    """Name the closest valid key for a typo, from the model that owns the mapping."""
    model = _model_at(loc[:-1])
    if model is None:
        return ""
    match = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1, cutoff=0.5)
    valid = ", ".join(model.model_fields)
    return f"; did you mean {match[0]!r}?" if match else f"; valid keys: {valid}"


def _model_at(loc: Loc) -> type[BaseModel] | None:
    model: type[BaseModel] = Spec
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        candidates = [a for a in getattr(field.annotation, "__args__", (field.annotation,))
                      if isinstance(a, type) and issubclass(a, BaseModel)]
        if not candidates:
            return None
        model = candidates[0]
    return model


def schema_json() -> str:
    return json.dumps(Spec.model_json_schema(), indent=2, sort_keys=True) + "\n"
