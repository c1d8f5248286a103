"""A DeepSeek-V4-Flash GGUF that the real b030961 loads for one layer slice (e.g. `42:output`), with no weights.

A distributed worker binds only the tensors of its own layers and, for `A:output`, the output head
(`weights_bind()` with `load_slice` in ds4.c). So this file holds the metadata of the tiny models
(engine/models/make_tiny_gguf.py: tokenizer and every deepseek4.* key) and the tensor infos of layer 42 and the
output head with their real types and shapes; the data are the holes of a sparse file (GBs apparent, a few KB
on disk). Enough for a worker to start, listen and reach for its coordinator, and for a coordinator to get as
far as its session (which a CPU build refuses); nothing here computes.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "engine" / "models"))
import make_tiny_gguf as tiny  # noqa: E402
import gguf  # noqa: E402

Q = gguf.GGMLQuantizationType
EMBD, VOCAB, HEADS, HEAD_DIM, LORA_Q, LORA_O, OUT_GROUP = 4096, 129280, 64, 512, 1024, 1024, 8
EXPERTS, FF_EXP, HC, IDX_HEADS, IDX_DIM, EXPERTS_USED, HASH_LAYERS = 256, 2048, 4, 64, 128, 6, 3
HC_DIM, HC_MIX = EMBD * HC, 2 * HC + HC * HC
LAYERS = 43


def _ratio(layer: int) -> int:
    """Flash's compress ratio per layer (ds4_expected_layer_compress_ratio): 0, 0, then 4 on even, 128 on odd."""
    return 0 if layer < 2 else 4 if layer % 2 == 0 else 128


def _head() -> list[tuple[str, tuple[int, ...], Q]]:
    return [("output_hc_base.weight", (HC,), Q.F32), ("output_hc_fn.weight", (HC_DIM, HC), Q.F16),
            ("output_hc_scale.weight", (1,), Q.F32), ("output_norm.weight", (EMBD,), Q.F32),
            ("output.weight", (EMBD, VOCAB), Q.Q8_0)]


def _layer(layer: int) -> list[tuple[str, tuple[int, ...], Q]]:
    """(name, dims as ds4 reads them (ne0 first), type) of one layer (weights_validate_layout in ds4.c)."""
    b = f"blk.{layer}."
    ratio = _ratio(layer)
    comp, idx = (2 if ratio == 4 else 1) * HEAD_DIM, 2 * IDX_DIM
    tensors = [
        (b + "hc_attn_fn.weight", (HC_DIM, HC_MIX), Q.F16), (b + "hc_attn_scale.weight", (3,), Q.F32),
        (b + "hc_attn_base.weight", (HC_MIX,), Q.F32), (b + "attn_norm.weight", (EMBD,), Q.F32),
        (b + "attn_q_a.weight", (EMBD, LORA_Q), Q.Q8_0), (b + "attn_q_a_norm.weight", (LORA_Q,), Q.F32),
        (b + "attn_q_b.weight", (LORA_Q, HEADS * HEAD_DIM), Q.Q8_0),
        (b + "attn_kv.weight", (EMBD, HEAD_DIM), Q.Q8_0), (b + "attn_kv_a_norm.weight", (HEAD_DIM,), Q.F32),
        (b + "attn_sinks.weight", (HEADS,), Q.F32),
        (b + "attn_output_a.weight", (HEAD_DIM * (HEADS // OUT_GROUP), OUT_GROUP * LORA_O), Q.Q8_0),
        (b + "attn_output_b.weight", (OUT_GROUP * LORA_O, EMBD), Q.Q8_0)]
    if ratio:
        tensors += [
            (b + "attn_compressor_ape.weight", (comp, ratio), Q.F16),
            (b + "attn_compressor_kv.weight", (EMBD, comp), Q.F16),
            (b + "attn_compressor_gate.weight", (EMBD, comp), Q.F16),
            (b + "attn_compressor_norm.weight", (HEAD_DIM,), Q.F32)]
    if ratio == 4:
        tensors += [
            (b + "indexer.attn_q_b.weight", (LORA_Q, IDX_HEADS * IDX_DIM), Q.F16),
            (b + "indexer.proj.weight", (EMBD, IDX_HEADS), Q.F16),
            (b + "indexer_compressor_ape.weight", (idx, 4), Q.F16),
            (b + "indexer_compressor_kv.weight", (EMBD, idx), Q.F16),
            (b + "indexer_compressor_gate.weight", (EMBD, idx), Q.F16),
            (b + "indexer_compressor_norm.weight", (IDX_DIM,), Q.F32)]
    tensors += [
        (b + "hc_ffn_fn.weight", (HC_DIM, HC_MIX), Q.F16), (b + "hc_ffn_scale.weight", (3,), Q.F32),
        (b + "hc_ffn_base.weight", (HC_MIX,), Q.F32), (b + "ffn_norm.weight", (EMBD,), Q.F32),
        (b + "ffn_gate_inp.weight", (EMBD, EXPERTS), Q.F16),
        (b + "ffn_gate_exps.weight", (EMBD, FF_EXP, EXPERTS), Q.IQ2_XXS),
        (b + "ffn_up_exps.weight", (EMBD, FF_EXP, EXPERTS), Q.IQ2_XXS),
        (b + "ffn_down_exps.weight", (FF_EXP, EMBD, EXPERTS), Q.Q2_K),
        (b + "ffn_gate_shexp.weight", (EMBD, FF_EXP), Q.Q8_0), (b + "ffn_up_shexp.weight", (EMBD, FF_EXP), Q.Q8_0),
        (b + "ffn_down_shexp.weight", (FF_EXP, EMBD), Q.Q8_0)]
    if layer < HASH_LAYERS:
        tensors.append((b + "ffn_gate_tid2eid.weight", (EXPERTS_USED, VOCAB), Q.I32))
    return tensors


def _tensors(first: int, last: int, output: bool) -> list[tuple[str, tuple[int, ...], Q]]:
    embd = [("token_embd.weight", (EMBD, VOCAB), Q.F16)] if first == 0 else []
    return embd + (_head() if output else []) + [t for il in range(first, last + 1) for t in _layer(il)]


def _nbytes(dims: tuple[int, ...], qtype: Q) -> int:
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    return int(np.prod(dims)) // block * size


def write(path: str | os.PathLike, layers: str = "42:output") -> Path:
    """The tensors of the slice `layers` (A:B or A:output): header, metadata and tensor infos, then the file
    extended to its full size with holes."""
    first, _, end = layers.partition(":")
    last = LAYERS - 1 if end == "output" else int(end)
    path = Path(path)
    writer = gguf.GGUFWriter(str(path), "deepseek4")
    for key, value in tiny.main_model_kv().items():
        typed = tiny._typed(key, value)
        writer.add_key_value(key, typed.value, typed.type, typed.item_type)
    total = 0
    for name, dims, qtype in _tensors(int(first), last, end == "output"):
        nbytes = _nbytes(dims, qtype)
        writer.add_tensor_info(name, tuple(reversed(dims)), np.float32, nbytes, raw_dtype=qtype)
        total += gguf.GGUFWriter.ggml_pad(nbytes, writer.data_alignment)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.fout[0].flush()
    header = writer.fout[0].tell()
    writer.close()
    data_start = gguf.GGUFWriter.ggml_pad(header, writer.data_alignment)
    os.truncate(path, data_start + total)
    return path


if __name__ == "__main__":
    print(write(sys.argv[1], *sys.argv[2:3]))
