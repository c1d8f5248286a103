"""Writes tiny synthetic GGUF files that pass (or deliberately exercise) the ds4
engine's model checks. Output is deterministic.

usage: python engine/models/make_tiny_gguf.py [OUTDIR]   (default: this directory)

  tiny-ds4flash.gguf        main model: every required deepseek4.* key + 2 tensors
  tiny-ds4flash-0731.gguf   the same, deepseek4.checkpoint_variant = "0731"
  tiny-mtp.gguf             MTP head: mtp.0.* tensors, no deepseek4.* keys
  tiny-dspark-0731.gguf     DSpark drafter (general.architecture deepseek4-dspark), variant 0731
  tiny-dspark-legacy.gguf   DSpark drafter without a variant
"""

import sys
from pathlib import Path

import gguf
import numpy as np

HERE = Path(__file__).resolve().parent
KNOWLEDGE = HERE.parent / "knowledge" / "ds4.yaml"

FILES = ["tiny-ds4flash.gguf", "tiny-ds4flash-0731.gguf", "tiny-mtp.gguf",
         "tiny-dspark-0731.gguf", "tiny-dspark-legacy.gguf"]

# value types as the real conversion writes them
_FLOAT_KEYS = {"deepseek4.rope.scaling.factor", "deepseek4.expert_weights_scale"}


def _knowledge():
    import yaml
    with open(KNOWLEDGE, encoding="utf-8") as f:
        return yaml.safe_load(f)


def _add(w, key, value):
    if isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, str):
        w.add_string(key, value)
    elif isinstance(value, float) or key in _FLOAT_KEYS:
        w.add_float32(key, float(value))
    elif isinstance(value, int):
        w.add_uint32(key, value)
    elif isinstance(value, list):
        w.add_array(key, value)
    else:
        raise TypeError("%s: unsupported value %r" % (key, value))


def _write(path, arch, kv, tensors):
    w = gguf.GGUFWriter(str(path), arch)
    for k, v in kv:
        _add(w, k, v)
    for name, arr in tensors:
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _t(shape, seed):
    n = int(np.prod(shape))
    return ((np.arange(n, dtype=np.float32) + seed) / 16.0).reshape(shape)


def main_kv(k):
    kv = [("general.name", "DeepSeek-V4-Flash tiny synthetic"), ("general.file_type", 7)]
    kv += list(k["main_model_required"].items())
    # further fields of a real conversion (not checked by the engine)
    kv += [("deepseek4.context_length", 1048576), ("deepseek4.rope.freq_base", 10000.0),
           ("deepseek4.rope.scaling.type", "yarn"), ("deepseek4.expert_group_count", 0),
           ("deepseek4.expert_group_used_count", 0), ("deepseek4.swiglu_clamp_exp", 10.0),
           ("deepseek4.attention.compress_ratios", [0, 0] + [4, 128] * 20 + [4])]
    return kv


def build(outdir=HERE):
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    k = _knowledge()
    variant_key = k["generation"]["variant_key"]
    newer = k["generation"]["newer"]
    main_tensors = [("token_embd.weight", _t((4, 8), 0)), ("blk.0.attn_norm.weight", _t((8,), 1))]
    _write(outdir / "tiny-ds4flash.gguf", "deepseek4", main_kv(k), main_tensors)
    _write(outdir / "tiny-ds4flash-0731.gguf", "deepseek4", main_kv(k) + [(variant_key, newer)], main_tensors)
    _write(outdir / "tiny-mtp.gguf", "deepseek4", [("general.name", "DeepSeek-V4-Flash MTP tiny synthetic")],
           [("mtp.0.eh_proj.weight", _t((8, 4), 2)), ("mtp.0.enorm.weight", _t((8,), 3)),
            ("mtp.0.hnorm.weight", _t((8,), 4))])
    d = k["dspark_drafter"]
    dkv = [("general.name", "DeepSeek-V4-Flash DSpark drafter tiny synthetic")]
    dkv += list(d["required"].items()) + [("deepseek4.dspark.target_layers", [40, 41, 42])]
    dt = [("dspark.markov.weight", _t((4, 4), 5)), ("blk.0.attn_norm.weight", _t((8,), 6))]
    _write(outdir / "tiny-dspark-0731.gguf", d["architecture"], dkv + [(variant_key, newer)], dt)
    _write(outdir / "tiny-dspark-legacy.gguf", d["architecture"], dkv, dt)
    return [outdir / f for f in FILES]


if __name__ == "__main__":
    for p in build(sys.argv[1] if len(sys.argv) > 1 else HERE):
        print("%s %d bytes" % (p, p.stat().st_size))
