"""The project's one GGUF writer: tiny synthetic DeepSeek-V4-Flash files with the metadata the real engine needs.

Every key comes from the engine knowledge (engine/knowledge: the fork's, which has the drafter) with the GGUF type the real engine reads (u32 keys as UINT32,
f32 keys as FLOAT32, arrays of UINT32 / FLOAT32, a BOOL), plus the tokenizer arrays vocab_load() reads first.
The real ds4-server accepts the metadata of `main_model_kv()` and stops at its first missing tensor
(tests/conformance checks exactly that). Output is deterministic.

usage: python engine/models/make_tiny_gguf.py [OUTDIR]   (default: this directory)

  tiny-ds4flash.gguf        main model: tokenizer + every deepseek4.* key the engine checks + 2 tensors
  tiny-ds4flash-0731.gguf   the same, deepseek4.checkpoint_variant = "0731"
  tiny-mtp.gguf             MTP head: mtp.0.* tensors, no deepseek4.* keys
  tiny-dspark-0731.gguf     DSpark drafter (general.architecture deepseek4-dspark), variant 0731
  tiny-dspark-legacy.gguf   DSpark drafter without a variant

In tests: `write(path, arch, kv, tensors)` writes any variant; kv values are `Value`s (exact GGUF type) or
plain Python values (bool → BOOL, int → UINT32, float → FLOAT32, str → STRING, list → ARRAY of those).
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from ds4_converge.engine_knowledge import FORK, for_version

HERE = Path(__file__).resolve().parent
T = gguf.GGUFValueType

FILES = ["tiny-ds4flash.gguf", "tiny-ds4flash-0731.gguf", "tiny-mtp.gguf",
         "tiny-dspark-0731.gguf", "tiny-dspark-legacy.gguf"]

# the GGUF type a real conversion writes for each kind of key (the engine accepts more: knowledge value_kinds)
KIND_TYPES = {"u32": T.UINT32, "u64": T.UINT64, "f32": T.FLOAT32, "bool": T.BOOL}
# a few ordinary tokens besides the special ones, so that a merge has something to name
PLAIN_TOKENS = ["a", "b", "ab", "P", "aris", "Paris", " ", "\n"]


@dataclass(frozen=True)
class Value:
    """A metadata value with its exact GGUF type (item_type: the element type of an ARRAY)."""

    type: T
    value: Any
    item_type: T | None = None


def knowledge() -> dict:
    """The fork's knowledge (the tiny files include its DSpark drafter and 0731 marker), a fresh copy each call
    (callers may change it)."""
    return copy.deepcopy(for_version(FORK))


def tokenizer_kv(k: dict | None = None) -> dict[str, Value]:
    tok = (k or knowledge())["gguf"]["tokenizer"]
    tokens = list(tok["special_tokens"]) + PLAIN_TOKENS
    return {tok["tokens"]: Value(T.ARRAY, tokens, T.STRING),
            tok["merges"]: Value(T.ARRAY, ["a b", "P aris"], T.STRING)}


def key_value(rule: dict, layers: int) -> Value:
    """The value a real conversion writes for one rule of knowledge gguf.main_model.keys."""
    if rule["kind"] == "array":
        item = T[rule["items"][0]]
        values = rule["values"] if "values" in rule else [rule["each"]] * layers
        return Value(T.ARRAY, [float(v) if item == T.FLOAT32 else int(v) for v in values], item)
    kind = KIND_TYPES[rule["kind"]]
    value = rule["value"]
    return Value(kind, float(value) if kind == T.FLOAT32 else value)


def main_model_kv(k: dict | None = None) -> dict[str, Value | Any]:
    """Everything the real engine reads from a main model, in the order a conversion writes it."""
    k = k or knowledge()
    model = k["gguf"]["main_model"]
    kv: dict[str, Value | Any] = {"general.name": "DeepSeek-V4-Flash tiny synthetic"}
    kv.update(tokenizer_kv(k))
    # block_count first, as a conversion writes it (the knowledge lists it where its value is checked)
    order = ["deepseek4.block_count", *(key for key in model["keys"] if key != "deepseek4.block_count")]
    kv.update({key: key_value(model["keys"][key], model["layers"]) for key in order})
    return kv


def dspark_kv(k: dict | None = None) -> dict[str, Any]:
    k = k or knowledge()
    return {"general.name": "DeepSeek-V4-Flash DSpark drafter tiny synthetic", **k["gguf"]["dspark_drafter"]["required"],
            "deepseek4.dspark.target_layers": [40, 41, 42]}


def main_tensors(k: dict | None = None) -> list:
    k = k or knowledge()
    return [(k["gguf"]["first_tensor"], _t((4, 8), 0)), ("blk.0.attn_norm.weight", _t((8,), 1))]


def mtp_tensors(k: dict | None = None) -> list:
    prefix = (k or knowledge())["gguf"]["mtp_tensor_prefix"]
    return [(f"{prefix}e_proj.weight", _t((8, 4), 2)), (f"{prefix}enorm.weight", _t((8,), 3)),
            (f"{prefix}hnorm.weight", _t((8,), 4))]


def _t(shape, seed):
    n = int(np.prod(shape))
    return ((np.arange(n, dtype=np.float32) + seed) / 16.0).reshape(shape)


def _typed(key: str, value) -> Value:
    if isinstance(value, Value):
        return value
    if isinstance(value, bool):
        return Value(T.BOOL, value)
    if isinstance(value, int):
        return Value(T.UINT32, value)
    if isinstance(value, float):
        return Value(T.FLOAT32, value)
    if isinstance(value, str):
        return Value(T.STRING, value)
    if isinstance(value, (list, tuple)) and value:
        return Value(T.ARRAY, list(value), _typed(key, value[0]).type)
    raise TypeError(f"{key}: unsupported value {value!r}")


def write(path, arch: str, kv: dict, tensors=()) -> Path:
    """Write one GGUF v3 file. tensors: names (8 float32 zeros each) or (name, ndarray) pairs."""
    path = Path(path)
    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in kv.items():
        typed = _typed(key, value)
        writer.add_key_value(key, typed.value, typed.type, typed.item_type)
    for tensor in tensors:
        name, array = (tensor, np.zeros(8, dtype=np.float32)) if isinstance(tensor, str) else tensor
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def build(outdir=HERE):
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    k = knowledge()
    variant = {k["gguf"]["generation"]["variant_key"]: k["gguf"]["generation"]["newer"]}
    write(outdir / "tiny-ds4flash.gguf", "deepseek4", main_model_kv(k), main_tensors(k))
    write(outdir / "tiny-ds4flash-0731.gguf", "deepseek4", {**main_model_kv(k), **variant}, main_tensors(k))
    write(outdir / "tiny-mtp.gguf", "deepseek4", {"general.name": "DeepSeek-V4-Flash MTP tiny synthetic"},
          mtp_tensors(k))
    drafter = k["gguf"]["dspark_drafter"]
    dt = [("dspark.markov.weight", _t((4, 4), 5)), ("blk.0.attn_norm.weight", _t((8,), 6))]
    write(outdir / "tiny-dspark-0731.gguf", drafter["architecture"], {**dspark_kv(k), **variant}, dt)
    write(outdir / "tiny-dspark-legacy.gguf", drafter["architecture"], dspark_kv(k), dt)
    return [outdir / f for f in FILES]


if __name__ == "__main__":
    for p in build(sys.argv[1] if len(sys.argv) > 1 else HERE):
        print("%s %d bytes" % (p, p.stat().st_size))
