"""Phantom DeepSeek-V4-Flash GGUF files: the exact layout the real engine loads, with holes for data.

The tensor layout is engine/knowledge/tensors.yaml (read from ds4.c of both upstream versions), the metadata the
one the tiny files carry (make_tiny_gguf.main_model_kv: engine/knowledge/ds4.yaml). The header and tensor infos
are written with gguf-py's writer, then the file is extended with ftruncate: about 86.7 GB apparent, a few MB on
disk. The real ds4-server maps it and serves from it on a CPU.

The answer is deterministic. With all-zero weights every logit is 0 and greedy decoding already picks token 0,
but sampling (a thinking request samples) would pick anything; so a few rows are real: token_embd = 1.0 for every
token a prompt can be made of, output_norm = 1 and output row 0 = Q8_0 blocks of d 0.01 and quants 1. The final hidden
state is then positive, token 0's logit the only one above 0, and every answer is ANSWER repeated.

The tokenizer: token 0 is ANSWER, then the special tokens vocab_load() looks up, the 256 byte symbols of GPT-2's
byte-level BPE (text with no token would be dropped) and the merges of a few common words, so that a short
prompt is a few tokens (each costs seconds on a CPU). The table is then padded with tokens no merge reaches up to
`deepseek4.vocab_size` (129280), as a real model's table is: the engine sizes its logits by the model's shape but
its distributed mode sizes them by the tokenizer (`ds4_engine_vocab_size()`), and a worker refuses any token id at
or above the table's length ("WORK token id is outside the model vocabulary"). With a short table a pair of real
processes returned empty answers, then that error (docs/distributed.md, "The phantom through a pair").

usage: python engine/models/make_phantom_gguf.py [OUTDIR]   (default: the current directory)

  phantom-ds4flash.gguf   main model
  phantom-mtp.gguf        legacy MTP support file (--mtp FILE; both versions)
  phantom-dspark.gguf     DSpark support file (b030961: --mtp FILE --dspark)
"""
from __future__ import annotations

import ast
import functools
import operator
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_tiny_gguf as tiny  # noqa: E402  (the project's GGUF metadata, one place)

LAYOUT = HERE.parent / "knowledge" / "tensors.yaml"
Q = gguf.GGMLQuantizationType
ALIGNMENT = 32  # GGUF's default (no general.alignment key is written)

ANSWER = " phantom"  # token 0: what every answer is made of
WORDS = ["Hi", " hi", "Hello", " hello", "Say", " say", "phantom", " phantom", " the", " word", " one", "OK",
         " is", " a", " of", "What", " What", " you", " to", " and", " in", "Paris", " Paris", " answer"]
FILES = {"main": "phantom-ds4flash.gguf", "mtp": "phantom-mtp.gguf", "dspark": "phantom-dspark.gguf"}


@functools.cache
def layout() -> dict:
    with open(LAYOUT, encoding="utf-8") as f:
        return yaml.safe_load(f)


# ----------------------------------------------------------------------------------------------- the layout

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.floordiv}


def evaluate(expr, names: dict[str, int]) -> int:
    """A dimension of the layout: an int, or +, -, *, / over names (a division must be exact)."""
    if isinstance(expr, int):
        return expr

    def walk(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and node.id in names:
            return names[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Div) and left % right:
                raise ValueError(f"{expr!r}: {left} / {right} is not exact")
            return _OPS[type(node.op)](left, right)
        raise ValueError(f"{expr!r}: only integers, names and + - * / ({ast.dump(node)})")

    return walk(ast.parse(str(expr), mode="eval").body)


def shape_names(lay: dict | None = None) -> dict[str, int]:
    lay = lay or layout()
    names = dict(lay["constants"])
    for name, expr in lay["derived"].items():
        names[name] = evaluate(expr, names)
    return names


@dataclass(frozen=True)
class Tensor:
    name: str
    type: Q
    dims: tuple[int, ...]  # GGUF order: dims[0] is the row length

    @property
    def nbytes(self) -> int:
        block, size = gguf.GGML_QUANT_SIZES[self.type]
        elements = int(np.prod(self.dims))
        if self.dims[0] % block:
            raise ValueError(f"{self.name}: row length {self.dims[0]} is not a multiple of {self.type.name}'s {block}")
        return elements // block * size


def _tensors(entries: list[dict], prefix: str, names: dict[str, int], layer: dict | None = None) -> list[Tensor]:
    out = []
    for entry in entries:
        when = entry.get("when")
        if when and not (layer or {}).get(when, False):
            continue
        out.append(Tensor(prefix + entry["name"], Q[entry["type"]], tuple(evaluate(d, names) for d in entry["dims"])))
    return out


def compress_ratios() -> list[int]:
    return tiny.knowledge()["gguf"]["main_model"]["keys"]["deepseek4.attention.compress_ratios"]["values"]


def main_tensors(lay: dict | None = None) -> list[Tensor]:
    """Every tensor weights_bind() binds, in the order it binds them."""
    lay = lay or layout()
    names = shape_names(lay)
    main = lay["main"]
    tensors = _tensors(main["global"], "", names)
    for il, ratio in enumerate(compress_ratios()[:names["n_layer"]]):
        per_layer = {**names, "ratio": ratio, "comp_width": (2 if ratio == 4 else 1) * names["n_head_dim"]}
        flags = {"compressed": ratio != 0, "indexed": ratio == 4, "hash": il < names["n_hash_layer"]}
        tensors += _tensors(main["layer"], main["layer_prefix"].format(layer=il), per_layer, flags)
    return tensors


def mtp_tensors(lay: dict | None = None) -> list[Tensor]:
    lay = lay or layout()
    names, mtp = shape_names(lay), lay["mtp"]
    return _tensors(mtp["head"], mtp["prefix"], names) + _tensors(mtp["block"], mtp["prefix"], names)


def dspark_tensors(lay: dict | None = None) -> list[Tensor]:
    lay = lay or layout()
    ds = lay["dspark"]
    names = {**shape_names(lay), "markov_rank": ds["metadata"]["deepseek4.dspark.markov_rank"],
             "target_layers": len(ds["metadata"]["deepseek4.dspark.target_layer_ids"])}
    tensors = []
    for stage in range(ds["stages"]):
        prefix = ds["stage_prefix"].format(stage=stage)
        tensors += _tensors(ds["block"], prefix, names)
        if stage == 0:
            tensors += _tensors(ds["first_stage"], prefix, names)
        if stage == ds["stages"] - 1:
            tensors += _tensors(ds["last_stage"], prefix, names)
    return tensors


# -------------------------------------------------------------------------------------------- the tokenizer


@functools.cache
def byte_symbols() -> tuple[str, ...]:
    """GPT-2's byte-level BPE alphabet: the symbol of each byte 0..255."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    symbols, extra = {}, 0
    for b in range(256):
        if b in printable:
            symbols[b] = chr(b)
        else:
            symbols[b] = chr(256 + extra)
            extra += 1
    return tuple(symbols[b] for b in range(256))


def encode(text: str) -> str:
    """Text as the tokenizer table spells it (each UTF-8 byte as its symbol: ' ' is 'Ġ')."""
    return "".join(byte_symbols()[b] for b in text.encode("utf-8"))


def tokenizer() -> tuple[list[str], list[str]]:
    """(tokens, merges): token 0 is ANSWER; every prefix of each of WORDS is a token, merged left to right; then
    fillers up to the model's vocab_size, which no merge builds (so no prompt is made of them)."""
    special = tiny.knowledge()["gguf"]["tokenizer"]["special_tokens"]
    tokens = [encode(ANSWER), *special, *byte_symbols()]
    merges: list[str] = []
    seen = set(tokens)
    for word in WORDS:
        symbols = encode(word)
        for end in range(2, len(symbols) + 1):
            merged = symbols[:end]
            merge = f"{symbols[:end - 1]} {symbols[end - 1]}"
            if merge not in merges:
                merges.append(merge)
            if merged not in seen:
                tokens.append(merged)
                seen.add(merged)
    tokens += [f"[phantom-pad-{i}]" for i in range(len(tokens), vocab_size())]
    return tokens, merges


def vocab_size() -> int:
    """The model's vocabulary (deepseek4.vocab_size): the output head's rows, and so the tokenizer's length."""
    return int(tiny.main_model_kv()["deepseek4.vocab_size"].value)


def prompt_tokens(tokens: list[str]) -> int:
    """How many of the table's tokens a prompt can be made of (the fillers come last)."""
    return next((i for i, t in enumerate(tokens) if t.startswith("[phantom-pad-")), len(tokens))


# ------------------------------------------------------------------------------------------------ writing


def main_kv() -> dict:
    tokens, merges = tokenizer()
    tok = tiny.knowledge()["gguf"]["tokenizer"]
    kv = tiny.main_model_kv()
    kv["general.name"] = "DeepSeek-V4-Flash phantom (sparse, no weights)"
    kv[tok["tokens"]] = tiny.Value(tiny.T.ARRAY, tokens, tiny.T.STRING)
    kv[tok["merges"]] = tiny.Value(tiny.T.ARRAY, merges, tiny.T.STRING)
    return kv


def offsets(tensors: list[Tensor]) -> dict[str, int]:
    """Each tensor's offset in the data section, as gguf-py's writer lays them out (each padded to ALIGNMENT)."""
    out, at = {}, 0
    for t in tensors:
        out[t.name] = at
        at += gguf.GGUFWriter.ggml_pad(t.nbytes, ALIGNMENT)
    return out


def write_sparse(path, arch: str, kv: dict, tensors: list[Tensor], rows: dict[str, list[tuple[int, bytes]]]
                 ) -> Path:
    """Header and tensor infos, then a hole for all the data, then `rows`: (byte offset in the tensor, bytes)."""
    path = Path(path)
    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in kv.items():
        typed = tiny._typed(key, value)
        writer.add_key_value(key, typed.value, typed.type, typed.item_type)
    for t in tensors:
        # gguf-py takes numpy's order (the reverse of GGUF's) and writes it reversed
        writer.add_tensor_info(t.name, list(reversed(t.dims)), np.dtype(np.float32), t.nbytes, raw_dtype=t.type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    data_start = gguf.GGUFWriter.ggml_pad(writer.fout[0].tell(), ALIGNMENT)
    writer.close()
    at = offsets(tensors)
    total = sum(gguf.GGUFWriter.ggml_pad(t.nbytes, ALIGNMENT) for t in tensors)
    os.truncate(path, data_start + total)
    by_name = {t.name: t for t in tensors}
    with open(path, "r+b") as f:
        for name, pieces in rows.items():
            for offset, data in pieces:
                if offset + len(data) > by_name[name].nbytes:
                    raise ValueError(f"{name}: {len(data)} bytes at {offset} run past the tensor")
                f.seek(data_start + at[name] + offset)
                f.write(data)
    return path


def q8_0_row(length: int, d: float = 0.01, quant: int = 1) -> bytes:
    """One Q8_0 row: blocks of (f16 scale, 32 int8 quants)."""
    block = np.float16(d).tobytes() + np.full(32, quant, dtype=np.int8).tobytes()
    return block * (length // 32)


def answer_rows(n_tokens: int, names: dict[str, int]) -> dict[str, list[tuple[int, bytes]]]:
    """The few real rows that make token 0 win: embeddings of every prompt token, the output norm, output row 0."""
    n_embd = names["n_embd"]
    return {
        "token_embd.weight": [(0, np.ones(n_embd * n_tokens, dtype=np.float16).tobytes())],
        "output_norm.weight": [(0, np.ones(n_embd, dtype=np.float32).tobytes())],
        "output.weight": [(0, q8_0_row(n_embd))],
    }


def write_main(path) -> Path:
    kv = main_kv()
    n_tokens = prompt_tokens(kv[tiny.knowledge()["gguf"]["tokenizer"]["tokens"]].value)
    return write_sparse(path, "deepseek4", kv, main_tensors(), answer_rows(n_tokens, shape_names()))


def write_mtp(path) -> Path:
    return write_sparse(path, "deepseek4", {"general.name": "DeepSeek-V4-Flash MTP phantom"}, mtp_tensors(), {})


def write_dspark(path) -> Path:
    metadata = layout()["dspark"]["metadata"]
    kv = {"general.name": "DeepSeek-V4-Flash DSpark phantom", **metadata}
    return write_sparse(path, "deepseek4", kv, dspark_tensors(), {})


WRITERS = {"main": write_main, "mtp": write_mtp, "dspark": write_dspark}


def build(outdir) -> list[Path]:
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    return [WRITERS[kind](outdir / name) for kind, name in FILES.items()]


if __name__ == "__main__":
    for p in build(sys.argv[1] if len(sys.argv) > 1 else "."):
        print(f"{p} {p.stat().st_size} bytes apparent, {p.stat().st_blocks * 512} on disk")
