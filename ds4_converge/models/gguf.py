"""What a GGUF file is (main model, MTP head, DSpark drafter) and whether a set of them fits together.

Reads only the header, key/values and tensor names; tensor data is never touched. gguf.GGUFReader would do,
but it decodes every tokenizer string: about 7 s for a 129k-token vocabulary, on every run. The lean reader
below (the format's type constants, struct over an mmap) skips big arrays and takes milliseconds; the tests
check it against GGUFReader. The rules come from engine knowledge (engine/knowledge/ds4.yaml):
the main model is recognised by the keys ds4's config_validate_model() requires, an MTP file by its
`mtp.0.*` tensor names, a DSpark drafter by `general.architecture = deepseek4-dspark`.
"""
from __future__ import annotations

import enum
import math
import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ds4_converge.engine_knowledge import load as load_knowledge

Kind = Literal["main", "mtp", "dspark", "unknown"]
Generation = Literal["0731", "legacy"]

ARCHITECTURE_KEY = "general.architecture"
GGUF_VERSION_KEY = "GGUF.version"
SUPPORTED_GGUF_VERSION = 3

_WHAT_IT_IS = {
    "mtp": "is an MTP draft head, not the main model",
    "dspark": "is a DSpark drafter (deepseek4-dspark), not the main model",
}


@dataclass(frozen=True)
class ModelIdentity:
    path: Path
    kind: Kind
    architecture: str | None
    generation: Generation
    problems: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """Short noun phrase for messages: 'a DSpark drafter (deepseek4-dspark, 0731)'."""
        return {
            "main": f"a DeepSeek-V4-Flash main model ({self.generation})",
            "mtp": f"an MTP draft head ({self.generation})",
            "dspark": f"a DSpark drafter (deepseek4-dspark, {self.generation})",
            "unknown": "not a recognised DeepSeek-V4-Flash file",
        }[self.kind]


def identify(path: str | Path, knowledge: dict | None = None) -> ModelIdentity:
    path = Path(path)
    knowledge = knowledge or load_knowledge()
    try:
        fields, tensor_names = read_gguf_header(path)
    except (ValueError, OSError, struct.error) as exc:  # bad magic, truncated header, unreadable
        return ModelIdentity(path, "unknown", None, "legacy", [f"not a readable GGUF file: {exc}"])
    return _classify(path, fields, tensor_names, knowledge)


def _classify(path: Path, fields: dict, tensor_names: list[str], knowledge: dict) -> ModelIdentity:
    architecture = fields.get(ARCHITECTURE_KEY)
    generation = _generation(fields, knowledge)
    version_problems = _version_problems(fields)
    dspark = knowledge["dspark_drafter"]
    if architecture == dspark["architecture"]:
        problems = version_problems + _key_problems(fields, dspark["required"])
        return ModelIdentity(path, "dspark", architecture, generation, problems)
    main_problems = version_problems + _key_problems(fields, knowledge["main_model_required"])
    if not main_problems:
        return ModelIdentity(path, "main", architecture, generation, [])
    if any(name.startswith(knowledge["mtp_tensor_prefix"]) for name in tensor_names):
        return ModelIdentity(path, "mtp", architecture, generation, version_problems)
    return ModelIdentity(path, "unknown", architecture, generation, main_problems)


def _generation(fields: dict, knowledge: dict) -> Generation:
    marker = knowledge["generation"]
    return "0731" if fields.get(marker["variant_key"]) == marker["newer"] else "legacy"


def _version_problems(fields: dict) -> list[str]:
    version = fields.get(GGUF_VERSION_KEY)
    if version != SUPPORTED_GGUF_VERSION:
        return [f"GGUF version: expected {SUPPORTED_GGUF_VERSION}, got {version}"]
    return []


def _key_problems(fields: dict, required: dict) -> list[str]:
    problems = []
    for key, expected in required.items():
        if key not in fields:
            problems.append(f"{key}: missing (expected {_show(expected)})")
        elif not _same_value(fields[key], expected):
            problems.append(f"{key}: expected {_show(expected)}, got {_show(fields[key])}")
    return problems


def _same_value(got, expected) -> bool:
    if isinstance(expected, bool) or isinstance(got, bool):
        return isinstance(got, bool) and got == expected
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        return math.isclose(got, expected, rel_tol=1e-6)
    return got == expected


def _show(value) -> str:
    return str(value).lower() if isinstance(value, bool) else repr(value) if isinstance(value, str) else str(value)


# ----------------------------------------------------------------------------------- GGUF header reader

GGUF_MAGIC = 0x46554747  # b"GGUF" read as a little-endian uint32


class _T(enum.IntEnum):
    """The GGUF file format's value types (the same numbers as gguf.GGUFValueType; a test compares them): the
    reader needs only these, and importing the gguf package (numpy with it) costs a no-op run most of its time."""

    UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)


_SCALAR_FORMATS = {_T.UINT8: "<B", _T.INT8: "<b", _T.UINT16: "<H", _T.INT16: "<h", _T.UINT32: "<I",
                   _T.INT32: "<i", _T.FLOAT32: "<f", _T.BOOL: "<?", _T.UINT64: "<Q", _T.INT64: "<q",
                   _T.FLOAT64: "<d"}
SMALL_ARRAY = 64  # arrays up to this length are read (e.g. dspark target_layers); longer ones are skipped


class _Cursor:
    """Little-endian reads over a memory map, with bounds checks so a garbage file fails fast."""

    def __init__(self, buf) -> None:
        self.buf, self.pos = buf, 0

    def scalar(self, fmt: str):
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.checked_count(self.scalar("<Q"))
        text = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", "replace")
        self.pos += n
        return text

    def skip_string(self) -> None:
        n = self.checked_count(self.scalar("<Q"))  # not `self.pos += …(self.scalar())`: pos would be read first
        self.pos += n

    def checked_count(self, n: int, item_size: int = 1) -> int:
        """n, unless n items of item_size bytes cannot fit in what is left of the file."""
        if n * item_size > len(self.buf) - self.pos:
            raise ValueError(f"truncated or corrupt GGUF header at byte {self.pos}")
        return n

    def value(self, vtype: int):
        if vtype == _T.STRING:
            return self.string()
        if vtype == _T.ARRAY:
            return self.array()
        return self.scalar(_SCALAR_FORMATS[_T(vtype)])

    def array(self):
        item_type, count = self.scalar("<I"), self.scalar("<Q")
        if count <= SMALL_ARRAY:
            return [self.value(item_type) for _ in range(self.checked_count(count))]
        if item_type == _T.STRING:
            for _ in range(self.checked_count(count, 8)):
                self.skip_string()
        elif item_type == _T.ARRAY:
            for _ in range(self.checked_count(count, 12)):
                self.array()
        else:
            self.pos += struct.calcsize(_SCALAR_FORMATS[_T(item_type)]) * self.checked_count(count)
        return f"<array of {count}>"


def read_gguf_header(path: str | Path) -> tuple[dict, list[str]]:
    """(fields, tensor names) of a little-endian GGUF; fields include GGUF.version like GGUFReader's."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        cur = _Cursor(buf)
        if cur.scalar("<I") != GGUF_MAGIC:
            raise ValueError("bad magic (not a GGUF file)")
        fields = {GGUF_VERSION_KEY: cur.scalar("<I")}
        if fields[GGUF_VERSION_KEY] not in (2, 3):
            raise ValueError(f"unsupported GGUF version {fields[GGUF_VERSION_KEY]} (or big-endian)")
        n_tensors, n_kv = cur.scalar("<Q"), cur.scalar("<Q")
        for _ in range(cur.checked_count(n_kv, 12)):
            key = cur.string()
            fields[key] = cur.value(cur.scalar("<I"))
        names = []
        for _ in range(cur.checked_count(n_tensors, 24)):
            names.append(cur.string())
            n_dims = cur.scalar("<I")
            cur.pos += 8 * cur.checked_count(n_dims, 8) + 4 + 8  # dims, type, offset
        return fields, names


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
    if main.generation == "0731":
        return [f"{main.path} is a 0731-generation base, which has no MTP head: "
                f"do not pair it with {mtp.path} (drop model.mtp, or use a legacy base)"]
    return []


def _drafter_pairing_errors(main: ModelIdentity, drafter: ModelIdentity) -> list[str]:
    if drafter.kind == "dspark" and drafter.generation != main.generation:
        return [f"DSpark drafter {drafter.path} is {drafter.generation}-generation but the base {main.path} is "
                f"{main.generation}-generation: use the drafter built for the base"]
    return []
