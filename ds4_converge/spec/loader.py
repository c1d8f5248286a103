"""Read a spec file: YAML with positions, `--set` overrides, validation errors as FILE:LINE:COL."""
from __future__ import annotations

import difflib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from ds4_converge.spec.model import FieldProblem, Spec
from ds4_converge.errors import Ds4Error
from ds4_converge.spec.yaml12 import BOMS, MAX_DEPTH, LimitExceeded, compose, construct

MAX_SPEC_BYTES = 64 * 1024  # a spec is a few KiB; parsing stays well under a second at this size
MAX_PROBLEMS = 20

Loc = tuple  # a path of keys and list indexes


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
    positions: dict = field(default_factory=dict, repr=False, compare=False)

    def locate(self, dotted: str, message: str) -> str:
        """A FILE:LINE:COL line for a problem found after validation (on this host, e.g. an unknown user)."""
        loc = tuple(dotted.split("."))
        line, col = self.positions.get(loc[:-1] + (loc[-1], "<key>")) or _nearest_position(loc, self.positions)
        return f"{self.path}:{line}:{col}: {dotted}: {message}"

    @property
    def base_dir(self) -> Path:
        """Relative paths in a spec are relative to the spec file, not to the caller's cwd."""
        return self.path.parent

    def relative_to_spec(self, raw: str) -> str:
        """`, read relative to the spec file's folder DIR` for a relative path (a spec copied elsewhere takes
        its relative paths along, which then name other files), else nothing."""
        if raw.startswith(("/", "~", "$")):
            return ""
        return f" ({raw}, read relative to the spec file's folder {self.base_dir})"


def load_spec(path: str | Path, overrides: list[str] = ()) -> LoadedSpec:
    path = Path(path)
    text = read_spec_text(path)
    try:
        node = compose(text)
        data = construct(node)
    except yaml.YAMLError as exc:
        line, column = _where(exc, text)
        raise SpecInvalid([Problem(f"invalid YAML: {_problem(exc)}", file=str(path), line=line,
                                   column=column)]) from None
    if not isinstance(data, dict):
        raise SpecInvalid([Problem("the spec must be a mapping with engine, model, server …", file=str(path),
                                   line=1, column=1)])
    positions = _positions(node)
    set_locs = {}
    for item in overrides:
        loc = apply_override(data, item, path)
        set_locs[loc] = item
    try:
        return LoadedSpec(Spec.model_validate(data), path.resolve(), positions)
    except ValidationError as exc:
        errors = exc.errors()
        problems = [_describe(err, path, positions, set_locs) for err in errors[:MAX_PROBLEMS]]
        if len(errors) > MAX_PROBLEMS:
            problems.append(Problem(f"… and {len(errors) - MAX_PROBLEMS} more problems", file=str(path)))
        raise SpecInvalid(problems) from None


def read_spec_text(path: Path) -> str:
    """The spec's text: a regular file of bounded size, in UTF-8 (or UTF-16/32 with a byte order mark)."""
    try:
        # O_NONBLOCK: a FIFO must not block the open; it is refused below like any non-regular file
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise SpecInvalid([Problem(f"cannot read spec: {exc.strerror}", file=str(path))]) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "a device, pipe or socket"
            raise SpecInvalid([Problem(f"is {kind}, not a regular file: a spec is a YAML file", file=str(path))])
        try:
            data = os.read(fd, MAX_SPEC_BYTES + 1)
        except OSError as exc:
            raise SpecInvalid([Problem(f"cannot read spec: {exc.strerror}", file=str(path))]) from None
    finally:
        os.close(fd)
    if len(data) > MAX_SPEC_BYTES:
        raise SpecInvalid([Problem(f"larger than {MAX_SPEC_BYTES // 1024} KiB: not a spec (a spec is a few KiB "
                                   f"of YAML)", file=str(path))])
    return decode(data, path)


def decode(data: bytes, path: Path) -> str:
    for bom, codec in BOMS:
        if data.startswith(bom):
            try:
                return data.decode(codec)
            except UnicodeDecodeError as exc:
                raise SpecInvalid([Problem(f"invalid {codec.upper()} at byte {exc.start} (the file starts "
                                           f"with a {codec.upper()} byte order mark)", file=str(path))]) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise SpecInvalid([Problem(f"not UTF-8 (byte 0x{data[exc.start]:02x}): save the spec as UTF-8 (UTF-16 "
                                   f"and UTF-32 are read when they start with a byte order mark)", file=str(path),
                                   line=line, column=column)]) from None


def _where(exc: yaml.YAMLError, text: str) -> tuple[int | None, int | None]:
    """(line, column) of a YAML error, both 1-based; (None, None) when it has no position."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is not None:
        return mark.line + 1, mark.column + 1
    position = getattr(exc, "position", None)  # a ReaderError (a character YAML does not allow)
    if isinstance(position, int) and 0 <= position <= len(text):
        return text.count("\n", 0, position) + 1, position - (text.rfind("\n", 0, position) + 1) + 1
    return None, None


def _problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.reader.ReaderError):
        return "a control character that YAML does not allow (NUL, or another non-printable character)"
    return str(getattr(exc, "problem", None) or exc)


# Keys of which a spec gives exactly one: `--set` of one replaces the other (the file keeps its rule).
EXCLUSIVE = {("engine", "ref"): ("engine", "installer"), ("engine", "installer"): ("engine", "ref")}


def apply_override(data: dict, item: str, path: Path) -> Loc:
    """`--set server.ctx=65536`: the value is read as YAML (with the spec file's limits), like helm's --set."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise SpecInvalid([Problem("expected dotted.key=value", override=item[:200])])
    if len(key) > 200 or key.count(".") > MAX_DEPTH or len(raw) > MAX_SPEC_BYTES:
        raise SpecInvalid([Problem("too long", override=item[:200] + "…")])
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
        target[loc[-1]] = construct(compose(raw)) if raw != "" else ""
    except LimitExceeded as exc:
        raise SpecInvalid([Problem(str(exc.problem), override=item[:200])]) from None
    except yaml.YAMLError:
        target[loc[-1]] = raw  # not YAML: the plain string it looks like
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
            shown = json.dumps(err["input"], default=str)
            message += f" (got {shown if len(shown) <= 80 else shown[:60] + f'… {len(shown)} characters'})"
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
