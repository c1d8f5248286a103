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


@dataclass(frozen=True)
class Problem:
    """One located problem; `str()` is the line people read: `FILE:LINE:COL: field.path: message`."""

    message: str
    file: str | None = None
    line: int | None = None
    column: int | None = None
    field: str | None = None  # dotted path in the spec, e.g. server.ctx
    override: str | None = None  # the `--set key=value` it came from

    def __str__(self) -> str:
        where = f"--set {self.override}" if self.override else ":".join(
            str(p) for p in (self.file, self.line, self.column) if p is not None)
        return ": ".join(p for p in (where, self.field, self.message) if p)

    def to_json(self) -> dict:
        return {"file": self.file, "line": self.line, "column": self.column, "field": self.field,
                "override": self.override, "message": self.message, "text": str(self)}


class SpecInvalid(Ds4Error):
    """The spec cannot be used; `problems` are ready-to-print lines, `located` the same as :class:`Problem`."""

    def __init__(self, problems: list[str | Problem]):
        self.located = [p if isinstance(p, Problem) else Problem(message=p) for p in problems]
        self.problems = [str(p) for p in problems]
        super().__init__("\n".join(self.problems))


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
        raise SpecInvalid([Problem(f"cannot read spec: {exc.strerror}", file=str(path))]) from None
    try:
        node = yaml.compose(text, Loader=SAFE_LOADER)
        data = yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise SpecInvalid([Problem(f"invalid YAML: {getattr(exc, 'problem', exc)}", file=str(path),
                                   line=mark.line + 1 if mark else None,
                                   column=mark.column + 1 if mark else None)]) from None
    if not isinstance(data, dict):
        raise SpecInvalid([Problem("the spec must be a mapping with engine, model, server …", file=str(path),
                                   line=1, column=1)])
    positions = _positions(node)
    set_locs = {}
    for item in overrides:
        loc = apply_override(data, item, path)
        set_locs[loc] = item
    try:
        return LoadedSpec(Spec.model_validate(data), path.resolve())
    except ValidationError as exc:
        raise SpecInvalid([_describe(err, path, positions, set_locs) for err in exc.errors()]) from None


# Keys of which a spec gives exactly one: `--set` of one replaces the other (the file keeps its rule).
EXCLUSIVE = {("engine", "ref"): ("engine", "installer"), ("engine", "installer"): ("engine", "ref")}


def apply_override(data: dict, item: str, path: Path) -> Loc:
    """`--set server.ctx=65536`: the value is read as YAML, like helm's --set."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise SpecInvalid([Problem("expected dotted.key=value", override=item)])
    loc = tuple(key.split("."))
    target = data
    for part in loc[:-1]:
        nxt = target.setdefault(part, {})
        if not isinstance(nxt, dict):
            raise SpecInvalid([Problem(f"{part} is not a mapping in {path}", override=item)])
        target = nxt
    other = EXCLUSIVE.get(loc)
    if other and isinstance(data.get(other[0]), dict):
        data[other[0]].pop(other[1], None)  # `--set engine.ref=X` on an installer spec: X is the version now
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


def _describe(err: dict, path: Path, positions: dict, set_locs: dict) -> Problem:
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
            return Problem(message, field=field, override=item)
    key_pos = positions.get(loc[:-1] + (loc[-1], "<key>")) if loc else None
    line, col = key_pos or _nearest_position(loc, positions)
    return Problem(message, file=str(path), line=line, column=col, field=field)


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
