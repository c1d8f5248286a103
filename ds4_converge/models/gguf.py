"""What a GGUF file is (main model, MTP head, DSpark drafter) and whether a set of them fits together.

Reads only the header, key/values and tensor names; tensor data is never touched. gguf.GGUFReader would do,
but it decodes every tokenizer string: about 7 s for a 129k-token vocabulary, on every run. The lean reader
below (the format's own type constants, struct over an mmap) skips big string arrays, only looking for the few
tokens it is asked about, and takes milliseconds; the tests check it against GGUFReader.

A main model is what the real engine accepts: vocab_load() (the tokenizer arrays and their special tokens),
then config_validate_model() (every deepseek4.* key, with the GGUF types the engine reads and its tolerance for
floats). The rules are data in engine knowledge (`gguf`), per engine version, checked against each real version
by tests/conformance: a file is judged by the rules of the version that will load it (8d57664 when none is
given). A support file is known by its tensors: any `mtp.0.*` (8d57664), or as b030961's support_model_detect()
tells a DSpark support file from a legacy MTP one. The fork's drafter is known by `general.architecture =
deepseek4-dspark`, and only the fork's rules know generations (`deepseek4.checkpoint_variant` "0731").
"""
from __future__ import annotations

import enum
import math
import mmap
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ds4_converge.engine_knowledge import load as load_knowledge

Kind = Literal["main", "mtp", "dspark", "unknown"]
Generation = Literal["0731", "legacy"] | None  # None: the rules judging the file know no generations (upstream)

ARCHITECTURE_KEY = "general.architecture"
GGUF_VERSION_KEY = "GGUF.version"

_WHAT_IT_IS = {
    "mtp": "is an MTP draft head, not the main model",
    "dspark": "is a DSpark drafter (deepseek4-dspark), not the main model",
}
SUPPORT_TENSORS = "mtp."  # every support file's tensors: mtp.<stage>.* (legacy MTP: stage 0 only)
_FORK_DRAFTER = "deepseek4-dspark"  # the fork's drafter architecture (knowledge: fork gguf.dspark_drafter)


@dataclass(frozen=True)
class ModelIdentity:
    path: Path
    kind: Kind
    architecture: str | None
    generation: Generation
    problems: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """Short noun phrase for messages: 'a DSpark drafter (deepseek4-dspark, 0731)'."""
        generation = f" ({self.generation})" if self.generation else ""
        return {
            "main": f"a DeepSeek-V4-Flash main model{generation}",
            "mtp": f"an MTP draft head{generation}",
            "dspark": (f"a DSpark drafter (deepseek4-dspark, {self.generation})" if self.architecture == _FORK_DRAFTER
                       else "a DSpark support file"),
            "unknown": "not a recognised DeepSeek-V4-Flash file",
        }[self.kind]


def identify(path: str | Path, knowledge: dict | None = None) -> ModelIdentity:
    """What the file is to the engine whose knowledge is given (default: the base, upstream 8d57664)."""
    path = Path(path)
    knowledge = knowledge or load_knowledge()
    try:
        header = read_gguf_header(path, watch=knowledge["gguf"]["tokenizer"]["special_tokens"])
    except (ValueError, OSError, struct.error) as exc:  # bad magic, truncated header, unreadable
        return ModelIdentity(path, "unknown", None, None, [f"not a readable GGUF file: {exc}"])
    return _classify(path, header, knowledge)


def _classify(path: Path, header: GgufHeader, knowledge: dict) -> ModelIdentity:
    fields = header.fields
    rules = knowledge["gguf"]
    architecture = _value(fields, ARCHITECTURE_KEY)
    generation = _generation(fields, rules)
    version_problems = _version_problems(fields, rules["version"])
    if header.truncation():
        return ModelIdentity(path, "unknown", architecture, generation, version_problems + [header.truncation()])
    drafter = rules.get("dspark_drafter")
    if drafter and architecture == drafter["architecture"]:
        problems = version_problems + _dspark_problems(fields, drafter["required"])
        return ModelIdentity(path, "dspark", architecture, generation, problems)
    names = set(header.tensor_names)
    if rules["first_tensor"] not in names and any(n.startswith(SUPPORT_TENSORS) for n in names):
        # a support file, whatever metadata it carries: the engine would stop at the main model's first tensor
        kind, problems = _support_kind(names, rules)
        return ModelIdentity(path, kind, architecture, generation, version_problems + problems)
    main_problems = version_problems + main_model_problems(fields, rules)
    if not main_problems:
        return ModelIdentity(path, "main", architecture, generation, [])
    return ModelIdentity(path, "unknown", architecture, generation, main_problems)


def _support_kind(names: set[str], rules: dict) -> tuple[Kind, list[str]]:
    """8d57664: any mtp.0.* tensor is an MTP head (--mtp binds them). b030961's support_model_detect(): DSpark
    when at least min_stages stages (mtp.<N>.*) carry the main projection, Markov and confidence heads, else
    legacy MTP when its three tensors are there, else nothing the engine can use."""
    if rules.get("support_detect") != "tensors":
        return ("mtp", []) if any(n.startswith(rules["mtp_tensor_prefix"]) for n in names) else ("unknown", [
            f"no {rules['mtp_tensor_prefix']}* tensors"])
    dspark, mtp = rules["support_files"]["dspark"], rules["support_files"]["mtp"]
    staged = [n for n in names if re.match(re.escape(dspark["stage_prefix"]) + r"\d+\.", n)]
    stages = 1 + max((int(n[len(dspark["stage_prefix"]):].split(".")[0]) for n in staged), default=-1)
    if stages >= dspark["min_stages"] and all(any(part in n for n in staged) for part in dspark["needs"]):
        return "dspark", []
    if all(t in names for t in mtp["tensors"]):
        return "mtp", []
    return "unknown", [f"support file: neither DSpark ({dspark['min_stages']}+ stages with "
                       f"{', '.join(p.strip('.') for p in dspark['needs'])}) nor legacy MTP "
                       f"({', '.join(mtp['tensors'])}): {stages} stage(s)"]


def _value(fields: dict[str, Field], key: str):
    found = fields.get(key)
    return found.value if found else None


def _generation(fields: dict, rules: dict) -> Generation:
    marker = rules.get("generation")
    if not marker:
        return None  # these rules read no generation marker: upstream cannot tell a 0731 file from another
    return "0731" if _value(fields, marker["variant_key"]) == marker["newer"] else "legacy"


def _version_problems(fields: dict, version: int) -> list[str]:
    got = _value(fields, GGUF_VERSION_KEY)
    return [] if got == version else [f"GGUF version: the engine reads only version {version}, got {got}"]


# ------------------------------------------------------------------------- the engine's metadata checks

def main_model_problems(fields: dict[str, Field], rules: dict) -> list[str]:
    """Why the real engine would refuse this file's metadata as a main model; empty when it accepts it.

    Mirrors vocab_load() then config_validate_model() of ds4.c: the tokenizer first, then every key in the
    engine's order, with the types the engine reads (a u32 key of another type reads as missing there).
    """
    tokenizer = _tokenizer_problems(fields, rules["tokenizer"])
    late = rules["tokenizer"].get("checked") == "after_tensors"
    problems = [] if late else tokenizer
    model = rules["main_model"]
    if model.get("shape_keys"):
        shape = _shape_problems(fields, model, rules["value_kinds"])
        if shape:
            return problems + shape + (tokenizer if late else [])
    unread = [key for key in model.get("read_first", ()) if not _readable(fields.get(key), model["keys"][key],
                                                                          rules["value_kinds"])]
    for key in unread:  # read before any value is checked: the engine stops at the first of these
        problems.append(f"{key}: {_key_problem(fields.get(key), model['keys'][key], rules['value_kinds'], 0)}")
    for key, rule in model["keys"].items():
        if key in unread:
            continue
        problem = _key_problem(fields.get(key), rule, rules["value_kinds"], model["layers"])
        if problem:
            problems.append(f"{key}: {problem}")
    return problems + tokenizer if late else problems


def _shape_problems(fields: dict[str, Field], model: dict, value_kinds: dict) -> list[str]:
    """b030961 reads the shape's u32 keys first (a missing one stops it), then picks the shape they all match."""
    keys = model["keys"]
    for key in model["shape_keys"]:
        if not _readable(fields.get(key), keys[key], value_kinds):
            return [f"{key}: {_key_problem(fields.get(key), keys[key], value_kinds, 0)}"]
    got = {key: _value(fields, key) for key in model["shape_keys"]}
    if all(got[k] == keys[k]["value"] for k in got):
        return []
    for name, shape in model.get("other_shapes", {}).items():
        if all(got[k] == shape.get(k, keys[k]["value"]) for k in got):
            return [f"DeepSeek4 shape: this is {name}, which ds4-converge does not serve (it serves "
                    f"{model['shape_name']})"]
    return [f"DeepSeek4 shape: matches neither {model['shape_name']} nor "
            f"{' nor '.join(model.get('other_shapes', {}))} (" + ", ".join(
                f"{k.removeprefix('deepseek4.')}={got[k]}" for k in got if got[k] != keys[k]["value"]) + ")"]


def _readable(found: Field | None, rule: dict, value_kinds: dict) -> bool:
    return found is not None and found.type.name in value_kinds[rule["kind"]]


def _tokenizer_problems(fields: dict[str, Field], tokenizer: dict) -> list[str]:
    problems = []
    for key in (tokenizer["tokens"], tokenizer["merges"]):
        found = fields.get(key)
        if found is None:
            problems.append(f"{key}: missing (the engine reads the tokenizer before anything else)")
        elif found.type != _T.ARRAY or found.item_type != _T.STRING:
            problems.append(f"{key}: the engine needs an array of strings, got {_type_name(found)}")
    tokens = fields.get(tokenizer["tokens"])
    if tokens is not None and tokens.item_type == _T.STRING:
        missing = [t for t in tokenizer["special_tokens"] if t not in tokens.found]
        if missing:
            problems.append(f"{tokenizer['tokens']}: special token(s) {', '.join(missing)} missing")
    return problems


def _key_problem(found: Field | None, rule: dict, value_kinds: dict, layers: int) -> str | None:
    kind = rule["kind"]
    if kind == "array":
        return _array_problem(found, rule, layers)
    accepted = value_kinds[kind]
    readable = found is not None and found.type.name in accepted
    if not readable:
        if rule.get("optional"):
            return None  # read as its default, which is the required value
        if found is None:
            return f"missing (expected {_show(rule['value'])})"
        return f"has type {_type_name(found)}; the engine reads it only as {' or '.join(accepted)}"
    if kind == "f32":
        ok = _same_f32(found.value, rule["value"])
    else:
        ok = found.value == rule["value"] and (kind != "bool" or isinstance(found.value, bool))
    return None if ok else f"expected {_show(rule['value'])}, got {_show(found.value)}"


def _array_problem(found: Field | None, rule: dict, layers: int) -> str | None:
    accepted = rule["items"]
    if found is None:
        return f"missing (expected an array of {' or '.join(accepted)})"
    if found.type != _T.ARRAY or found.item_type is None or found.item_type.name not in accepted:
        return f"the engine needs an array of {' or '.join(accepted)}, got {_type_name(found)}"
    if found.count < layers:
        return f"has {found.count} elements, shorter than the {layers} layers"
    expected = rule["values"] if "values" in rule else [rule["each"]] * layers
    got = found.value[:layers]
    is_float = found.item_type.name.startswith("FLOAT")
    for layer, (g, want) in enumerate(zip(got, expected)):
        if not is_float and g < 0:
            return f"layer {layer} has a negative value {g}"
        if not (_same_f32(g, want) if is_float else g == want):
            return f"layer {layer}: expected {_show(want)}, got {_show(g)}"
    return None


def _same_f32(got, expected) -> bool:
    """config_expect_f32(): |got - expected| <= max(|expected|, 1) * 1e-6, all in float32 like the engine."""
    got, expected = _f32(got), _f32(expected)
    scale = max(abs(expected), 1.0)
    # each operation rounded to float32: float64 holds enough bits that this equals float32 arithmetic
    return abs(_f32(got - expected)) <= _f32(scale * _f32(1.0e-6))


def _f32(x: float) -> float:
    try:
        return _F32.unpack(_F32.pack(x))[0]
    except OverflowError:  # beyond float32's range: infinity, as a C cast gives
        return math.copysign(math.inf, x)


_F32 = struct.Struct("<f")


def _dspark_problems(fields: dict[str, Field], required: dict) -> list[str]:
    problems = []
    for key, expected in required.items():
        got = _value(fields, key)
        if key not in fields:
            problems.append(f"{key}: missing (expected {_show(expected)})")
        elif got != expected:
            problems.append(f"{key}: expected {_show(expected)}, got {_show(got)}")
    return problems


def _type_name(found: Field) -> str:
    if found.type == _T.ARRAY:
        return f"an array of {found.item_type.name if found.item_type is not None else '?'}"
    return found.type.name


def _show(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


# ----------------------------------------------------------------------------------- GGUF header reader

GGUF_MAGIC = 0x46554747  # b"GGUF" read as a little-endian uint32


class _T(enum.IntEnum):
    """The GGUF file format's value types (the same numbers as gguf.GGUFValueType; a test compares them): the
    reader needs only these, and importing the gguf package (numpy with it) costs a no-op run most of its time."""

    UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)


#: ggml tensor type -> (elements per block, bytes per block): the format's table (gguf.GGML_QUANT_SIZES; a test
#: compares them), here so that a run reads a header without importing gguf and numpy
GGML_BLOCK_SIZES = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 9: (32, 40),
    10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292),
    16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82),
    23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2),
    34: (256, 54), 35: (256, 66), 39: (32, 17), 40: (64, 36), 41: (128, 18),
}
_SCALAR_FORMATS = {_T.UINT8: "B", _T.INT8: "b", _T.UINT16: "H", _T.INT16: "h", _T.UINT32: "I",
                   _T.INT32: "i", _T.FLOAT32: "f", _T.BOOL: "?", _T.UINT64: "Q", _T.INT64: "q",
                   _T.FLOAT64: "d"}
SMALL_ARRAY = 64  # string arrays up to this length are read (e.g. merges of a tiny file); longer ones skipped
NUMBER_ARRAY = 1 << 16  # numeric arrays up to this length are read in one unpack (per-layer values)
_U64 = struct.Struct("<Q")


@dataclass(frozen=True)
class Field:
    """One metadata value: its GGUF type, the value (a skipped array: '<array of N>'), an array's element type
    and length, and which of the watched strings a skipped string array contains."""

    type: _T
    value: Any
    item_type: _T | None = None
    count: int = 0
    found: frozenset[str] = frozenset()


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of the table: its GGML type, dimensions (GGUF order: dim 0 is the row length) and data bytes."""

    name: str
    ggml_type: int
    dims: tuple[int, ...]
    bytes: int


@dataclass(frozen=True)
class GgufHeader:
    fields: dict[str, Field]
    tensor_names: list[str]
    size: int = 0  # of the file
    data_end: int = 0  # where the last tensor's data ends (tensors of an unknown type count for nothing)
    last_tensor: str | None = None  # the tensor that ends there
    tensors: tuple[TensorInfo, ...] = ()

    def values(self) -> dict[str, Any]:
        return {key: f.value for key, f in self.fields.items()}

    def truncation(self) -> str | None:
        """The engine maps the whole file and refuses one whose tensor data runs past its end."""
        if self.data_end > self.size:
            return (f"tensor data: {self.last_tensor} ends at byte {self.data_end} but the file has {self.size} "
                    f"bytes (truncated)")
        return None


class _Cursor:
    """Little-endian reads over a memory map, with bounds checks so a garbage file fails fast."""

    def __init__(self, buf, watch: frozenset[bytes]) -> None:
        self.buf, self.pos, self.watch = buf, 0, watch

    def scalar(self, fmt: str):
        value = struct.unpack_from("<" + fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize("<" + fmt)
        return value

    def _skip_strings(self, count: int) -> int:
        """Step over `count` strings (a 129k-token vocabulary: the hot loop); returns where they started."""
        buf, pos, end, unpack = self.buf, self.pos, len(self.buf), _U64.unpack_from
        start = pos
        for _ in range(count):
            pos += 8 + unpack(buf, pos)[0]
            if pos > end:
                raise ValueError(f"truncated or corrupt GGUF header at byte {self.pos}")
        self.pos = pos
        return start

    def string(self) -> str:
        n = self.checked_count(self.scalar("Q"))
        data = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return data.decode("utf-8", "replace")

    def checked_count(self, n: int, item_size: int = 1) -> int:
        """n, unless n items of item_size bytes cannot fit in what is left of the file."""
        if n * item_size > len(self.buf) - self.pos:
            raise ValueError(f"truncated or corrupt GGUF header at byte {self.pos}")
        return n

    def value(self, vtype: int) -> Field:
        vtype = _T(vtype)
        if vtype == _T.STRING:
            return Field(vtype, self.string())
        if vtype == _T.ARRAY:
            return self.array()
        return Field(vtype, self.scalar(_SCALAR_FORMATS[vtype]))

    def array(self) -> Field:
        item_type, count = _T(self.scalar("I")), self.scalar("Q")
        if item_type in _SCALAR_FORMATS and count <= NUMBER_ARRAY:
            fmt = _SCALAR_FORMATS[item_type]
            self.checked_count(count, struct.calcsize("<" + fmt))
            values = list(struct.unpack_from(f"<{count}{fmt}", self.buf, self.pos))
            self.pos += struct.calcsize(f"<{count}{fmt}")
            return Field(_T.ARRAY, values, item_type, count)
        if count <= SMALL_ARRAY:
            items = [self.value(item_type).value for _ in range(self.checked_count(count))]
            return Field(_T.ARRAY, items, item_type, count, frozenset(i for i in items if isinstance(i, str)))
        found = set()
        if item_type == _T.STRING:
            start = self._skip_strings(self.checked_count(count, 8))
            # each watched string as it is stored (length, then bytes), searched at C speed within the array
            found = {w.decode("utf-8") for w in self.watch
                     if self.buf.find(struct.pack("<Q", len(w)) + w, start, self.pos) != -1}
        elif item_type == _T.ARRAY:
            for _ in range(self.checked_count(count, 12)):
                self.array()
        else:
            self.pos += struct.calcsize("<" + _SCALAR_FORMATS[item_type]) * self.checked_count(count)
        return Field(_T.ARRAY, f"<array of {count}>", item_type, count, frozenset(found))


def read_gguf_header(path: str | Path, watch=()) -> GgufHeader:
    """Fields (GGUF.version included, like GGUFReader's) and tensor names of a little-endian GGUF.
    `watch`: strings to look for in string arrays too long to be read whole (the tokenizer's special tokens)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        cur = _Cursor(buf, frozenset(w.encode("utf-8") for w in watch))
        if cur.scalar("I") != GGUF_MAGIC:
            raise ValueError("bad magic (not a GGUF file)")
        version = cur.scalar("I")
        if version not in (2, 3):
            raise ValueError(f"unsupported GGUF version {version} (or big-endian)")
        fields = {GGUF_VERSION_KEY: Field(_T.UINT32, version)}
        n_tensors, n_kv = cur.scalar("Q"), cur.scalar("Q")
        for _ in range(cur.checked_count(n_kv, 12)):
            key = cur.string()
            fields[key] = cur.value(cur.scalar("I"))
        names, extents, tensors = [], [], []
        for _ in range(cur.checked_count(n_tensors, 24)):
            names.append(cur.string())
            n_dims = cur.scalar("I")
            dims = struct.unpack_from(f"<{cur.checked_count(n_dims, 8)}Q", buf, cur.pos)
            cur.pos += 8 * n_dims
            ggml_type, offset = cur.scalar("I"), cur.scalar("Q")
            tensors.append(TensorInfo(names[-1], ggml_type, dims, _tensor_bytes(ggml_type, dims)))
            extents.append((names[-1], offset + tensors[-1].bytes))
        alignment = fields.get("general.alignment")
        align = alignment.value if alignment and alignment.type == _T.UINT32 and alignment.value else 32
        data_start = -(-cur.pos // align) * align
        last, end = max(extents, key=lambda e: e[1], default=(None, 0))
        return GgufHeader(fields, names, len(buf), data_start + end if last else 0, last, tuple(tensors))


def _tensor_bytes(ggml_type: int, dims) -> int:
    if ggml_type not in GGML_BLOCK_SIZES:
        return 0  # the engine warns about an unknown type and does not count its bytes
    block, size = GGML_BLOCK_SIZES[ggml_type]
    return -(-(math.prod(dims) % (1 << 64)) // block) * size


def judge_files(main: Path, mtp: Path | None = None, dspark: Path | None = None,
                knowledge: dict | None = None) -> list[str]:
    """check_model_set() of the files as the engine whose knowledge is given sees them."""
    return check_model_set(identify(main, knowledge), mtp=identify(mtp, knowledge) if mtp else None,
                           dspark=identify(dspark, knowledge) if dspark else None)


def check_model_set(main: ModelIdentity, mtp: ModelIdentity | None = None,
                    dspark: ModelIdentity | None = None) -> list[str]:
    """Every reason this combination must not be served; empty when it is fine."""
    errors = _main_errors(main)
    if mtp is not None:
        errors += _role_errors(mtp, "mtp", "MTP file") + _mtp_pairing_errors(main, mtp)
    if dspark is not None:
        errors += _role_errors(dspark, "dspark", "DSpark drafter") + _drafter_pairing_errors(main, dspark)
    return errors


def _main_errors(main: ModelIdentity) -> list[str]:
    if main.kind == "main":
        return []
    if main.kind in _WHAT_IT_IS:
        return [f"{main.path} {_WHAT_IT_IS[main.kind]}"]
    return [f"{main.path} is not a DeepSeek-V4-Flash main model: {'; '.join(main.problems)}"]


def _role_errors(identity: ModelIdentity, kind: Kind, role: str) -> list[str]:
    errors = []
    if identity.kind != kind:
        errors.append(f"{identity.path} was given as the {role} but is {identity.describe()}")
    elif identity.problems:
        errors.append(f"{identity.path} ({role}): {'; '.join(identity.problems)}")
    return errors


def _mtp_pairing_errors(main: ModelIdentity, mtp: ModelIdentity) -> list[str]:
    if main.generation == "0731":  # a fork rule: under upstream rules generation is None
        return [f"{main.path} is a 0731-generation base, which has no MTP head: "
                f"do not pair it with {mtp.path} (drop model.mtp, or use a legacy base)"]
    return []


def _drafter_pairing_errors(main: ModelIdentity, drafter: ModelIdentity) -> list[str]:
    if drafter.kind == "dspark" and drafter.generation and drafter.generation != main.generation:
        return [f"DSpark drafter {drafter.path} is {drafter.generation}-generation but the base {main.path} is "
                f"{main.generation}-generation: use the drafter built for the base"]
    return []
