"""A DeepSeek-V4-Flash GGUF that the real b030961 worker loads for the slice `42:output`, with no weights on disk.

A distributed worker binds only the tensors of its own layers and, for `A:output`, the output head
(`weights_bind()` with `load_slice` in ds4.c). So this file holds the metadata of the tiny models
(engine/models/make_tiny_gguf.py: tokenizer and every deepseek4.* key) and the tensor infos of layer 42 and the
output head with their real types and shapes; the data are the holes of a sparse file (about 11 GB apparent,
a few KB on disk). Enough for a worker to start, listen and reach for its coordinator; nothing here computes.
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
EXPERTS, FF_EXP, HC, IDX_HEADS, IDX_DIM = 256, 2048, 4, 64, 128
HC_DIM, HC_MIX = EMBD * HC, 2 * HC + HC * HC
LAYER = 42  # the last Flash layer; even, so compress ratio 4 (compressor and indexer tensors)
SLICE = f"{LAYER}:output"


def _tensors(layer: int = LAYER) -> list[tuple[str, tuple[int, ...], Q]]:
    """(name, dims as ds4 reads them (ne0 first), type) for one ratio-4 layer and the output head."""
    b = f"blk.{layer}."
    comp, idx = 2 * HEAD_DIM, 2 * IDX_DIM
    return [
        ("output_hc_base.weight", (HC,), Q.F32), ("output_hc_fn.weight", (HC_DIM, HC), Q.F16),
        ("output_hc_scale.weight", (1,), Q.F32), ("output_norm.weight", (EMBD,), Q.F32),
        ("output.weight", (EMBD, VOCAB), Q.Q8_0),
        (b + "hc_attn_fn.weight", (HC_DIM, HC_MIX), Q.F16), (b + "hc_attn_scale.weight", (3,), Q.F32),
        (b + "hc_attn_base.weight", (HC_MIX,), Q.F32), (b + "attn_norm.weight", (EMBD,), Q.F32),
        (b + "attn_q_a.weight", (EMBD, LORA_Q), Q.Q8_0), (b + "attn_q_a_norm.weight", (LORA_Q,), Q.F32),
        (b + "attn_q_b.weight", (LORA_Q, HEADS * HEAD_DIM), Q.Q8_0),
        (b + "attn_kv.weight", (EMBD, HEAD_DIM), Q.Q8_0), (b + "attn_kv_a_norm.weight", (HEAD_DIM,), Q.F32),
        (b + "attn_sinks.weight", (HEADS,), Q.F32),
        (b + "attn_output_a.weight", (HEAD_DIM * (HEADS // OUT_GROUP), OUT_GROUP * LORA_O), Q.Q8_0),
        (b + "attn_output_b.weight", (OUT_GROUP * LORA_O, EMBD), Q.Q8_0),
        (b + "attn_compressor_ape.weight", (comp, 4), Q.F16), (b + "attn_compressor_kv.weight", (EMBD, comp), Q.F16),
        (b + "attn_compressor_gate.weight", (EMBD, comp), Q.F16),
        (b + "attn_compressor_norm.weight", (HEAD_DIM,), Q.F32),
        (b + "indexer.attn_q_b.weight", (LORA_Q, IDX_HEADS * IDX_DIM), Q.F16),
        (b + "indexer.proj.weight", (EMBD, IDX_HEADS), Q.F16),
        (b + "indexer_compressor_ape.weight", (idx, 4), Q.F16),
        (b + "indexer_compressor_kv.weight", (EMBD, idx), Q.F16),
        (b + "indexer_compressor_gate.weight", (EMBD, idx), Q.F16),
        (b + "indexer_compressor_norm.weight", (IDX_DIM,), Q.F32),
        (b + "hc_ffn_fn.weight", (HC_DIM, HC_MIX), Q.F16), (b + "hc_ffn_scale.weight", (3,), Q.F32),
        (b + "hc_ffn_base.weight", (HC_MIX,), Q.F32), (b + "ffn_norm.weight", (EMBD,), Q.F32),
        (b + "ffn_gate_inp.weight", (EMBD, EXPERTS), Q.F16),
        (b + "ffn_gate_exps.weight", (EMBD, FF_EXP, EXPERTS), Q.IQ2_XXS),
        (b + "ffn_up_exps.weight", (EMBD, FF_EXP, EXPERTS), Q.IQ2_XXS),
        (b + "ffn_down_exps.weight", (FF_EXP, EMBD, EXPERTS), Q.Q2_K),
        (b + "ffn_gate_shexp.weight", (EMBD, FF_EXP), Q.Q8_0), (b + "ffn_up_shexp.weight", (EMBD, FF_EXP), Q.Q8_0),
        (b + "ffn_down_shexp.weight", (FF_EXP, EMBD), Q.Q8_0),
    ]


def _nbytes(dims: tuple[int, ...], qtype: Q) -> int:
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    return int(np.prod(dims)) // block * size


def write(path: str | os.PathLike) -> Path:
    """Header, metadata and tensor infos, then the file extended to its full size with holes."""
    path = Path(path)
    writer = gguf.GGUFWriter(str(path), "deepseek4")
    for key, value in tiny.main_model_kv().items():
        typed = tiny._typed(key, value)
        writer.add_key_value(key, typed.value, typed.type, typed.item_type)
    total = 0
    for name, dims, qtype in _tensors():
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
    print(write(sys.argv[1]))
