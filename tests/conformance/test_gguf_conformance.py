"""Model metadata: for every variant of a synthetic GGUF, ds4-converge's verdict is the real engine's.

The real ds4-server accepted a file's metadata when it gets as far as binding tensors ("ds4: required tensor is
missing: …", exit 1): our tiny files carry two tensors only. Otherwise it refused, naming a key; ds4-converge
must refuse too, naming the same key first. The simulated engine (engine/sim), which stands in for the real
one in the end-to-end tests, must print the very same last line.
"""
from __future__ import annotations

import contextlib
import io
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from real_engine import REPO

sys.path.insert(0, str(REPO / "engine" / "models"))
sys.path.insert(0, str(REPO / "engine" / "sim"))

import ds4_common as sim  # noqa: E402
import make_tiny_gguf as tiny_gguf  # noqa: E402
from make_tiny_gguf import T, Value  # noqa: E402

from ds4_converge.engine_knowledge import load as load_knowledge  # noqa: E402
from ds4_converge.models.gguf import identify  # noqa: E402

K = load_knowledge()
RULES = K["gguf"]["main_model"]
LAYERS = RULES["layers"]
TOKENIZER = K["gguf"]["tokenizer"]
ACCEPTED = "accepted"

pytestmark = pytest.mark.slow  # runs the real ds4-server some 250 times (about 10 s)


@dataclass
class Variant:
    name: str
    kv: dict
    tensors: list = field(default_factory=tiny_gguf.main_tensors)
    arch: str = "deepseek4"
    version: int = 3


def _base() -> dict:
    return tiny_gguf.main_model_kv(K)


def _with(name: str, **changes) -> Variant:
    return Variant(name, {**_base(), **changes})


def _without(name: str, *keys: str) -> Variant:
    kv = _base()
    for key in keys:
        del kv[key]
    return Variant(name, kv)


def _wrong_values(key: str, rule: dict) -> list[Value]:
    kind, value = rule["kind"], rule.get("value")
    if kind == "u32":
        return [Value(T.UINT32, value + 1)]
    if kind == "u64":
        return [Value(T.UINT64, value * 2), Value(T.UINT32, value - 1)]
    if kind == "f32":
        return [Value(T.FLOAT32, value * 2 + 0.5), Value(T.FLOAT64, value * 1.001 + 1e-3)]
    if kind == "bool":
        return [Value(T.BOOL, not value)]
    items = T[rule["items"][0]]
    values = list(rule["values"]) if "values" in rule else [rule["each"]] * LAYERS
    values[5] = values[5] + 1
    return [Value(T.ARRAY, values, items)]


def _other_types(key: str, rule: dict) -> list[Value]:
    """Same value, another GGUF type: some the engine reads, some it does not."""
    kind, value = rule["kind"], rule.get("value")
    if kind == "u32":
        return [Value(T.INT32, value), Value(T.UINT64, value), Value(T.FLOAT32, float(value))]
    if kind == "u64":
        return [Value(T.UINT32, value), Value(T.INT64, value), Value(T.FLOAT32, float(value))]
    if kind == "f32":
        others = [Value(T.FLOAT64, value), Value(T.STRING, str(value)), Value(T.UINT64, int(value))]
        if float(value).is_integer():
            others += [Value(T.UINT32, int(value)), Value(T.INT32, int(value))]
        return others
    if kind == "bool":
        return [Value(T.UINT8, 1), Value(T.UINT32, 1)]
    values = list(rule["values"]) if "values" in rule else [rule["each"]] * LAYERS
    if "values" in rule:  # integer array
        return [Value(T.ARRAY, values, T.INT32), Value(T.ARRAY, [float(v) for v in values], T.FLOAT32),
                Value(T.ARRAY, values, T.UINT64), Value(T.UINT32, values[0])]
    return [Value(T.ARRAY, values, T.FLOAT64), Value(T.ARRAY, [int(v) for v in values], T.UINT32),
            Value(T.FLOAT32, values[0])]


def _arrays(key: str, rule: dict) -> list[tuple[str, Value]]:
    items = T[rule["items"][0]]
    values = list(rule["values"]) if "values" in rule else [rule["each"]] * LAYERS
    extra = [values[-1]] * 3
    cases = [("short", Value(T.ARRAY, values[:-1], items)), ("longer", Value(T.ARRAY, values + extra, items))]
    if "values" in rule:
        negative = [-v if i == 3 else v for i, v in enumerate(values)]
        cases.append(("negative", Value(T.ARRAY, negative, T.INT32)))
    return cases


def variants() -> list[Variant]:
    found = [Variant("complete", _base())]
    for key, rule in RULES["keys"].items():
        found.append(_without(f"{key} missing", key))
        found += [_with(f"{key} = {v.value if v.type != T.ARRAY else 'array'} ({v.type.name})", **{key: v})
                  for v in _wrong_values(key, rule)]
        found += [_with(f"{key} as {v.type.name}" + (f" of {v.item_type.name}" if v.item_type is not None else ""),
                        **{key: v}) for v in _other_types(key, rule)]
        if rule["kind"] == "array":
            found += [_with(f"{key} {what}", **{key: v}) for what, v in _arrays(key, rule)]
    found.append(_with("f32 within the engine's tolerance", **{
        "deepseek4.rope.freq_base": Value(T.FLOAT32, 10000.009),
        "deepseek4.attention.layer_norm_rms_epsilon": Value(T.FLOAT64, 1.0e-6 + 9.0e-7)}))
    found.append(_with("f32 just outside the engine's tolerance",
                       **{"deepseek4.rope.freq_base": Value(T.FLOAT32, 10000.02)}))
    found.append(_with("old indexer key names (deepseek4.indexer.*, which the engine never reads)", **{
        k.replace(".attention.indexer.", ".indexer."): v for k, v in _base().items() if ".indexer." in k}))
    found[-1].kv = {k: v for k, v in found[-1].kv.items() if ".attention.indexer." not in k}
    # the tokenizer, which the engine reads before any deepseek4.* key
    found.append(_without("no tokenizer", TOKENIZER["tokens"], TOKENIZER["merges"]))
    found.append(_without("no token table", TOKENIZER["tokens"]))
    found.append(_without("no merge table", TOKENIZER["merges"]))
    found.append(_with("token table of integers", **{TOKENIZER["tokens"]: Value(T.ARRAY, [1, 2, 3], T.UINT32)}))
    found.append(_with("merge table not an array", **{TOKENIZER["merges"]: "a b"}))
    for token in TOKENIZER["special_tokens"]:
        tokens = [t for t in _base()[TOKENIZER["tokens"]].value if t != token]
        found.append(_with(f"no {token} token", **{TOKENIZER["tokens"]: Value(T.ARRAY, tokens, T.STRING)}))
    found.append(_with("no tokenizer and a wrong block_count", **{"deepseek4.block_count": 61}))
    del found[-1].kv[TOKENIZER["tokens"]]
    # not a GGUF v3 main model at all
    version2 = Variant("GGUF version 2", _base())
    version2.version = 2
    found.append(version2)
    found.append(Variant("an MTP head", {"general.name": "MTP"}, tiny_gguf.mtp_tensors(K)))
    found.append(Variant("an MTP head with the main model's metadata", _base(), tiny_gguf.mtp_tensors(K)))
    found.append(Variant("a DSpark drafter", tiny_gguf.dspark_kv(K), ["dspark.0.attn_norm.weight"],
                         arch=K["dspark_drafter"]["architecture"]))
    return found


VARIANTS = variants()


def write(variant: Variant, path: Path) -> Path:
    tiny_gguf.write(path, variant.arch, variant.kv, variant.tensors)
    if variant.version != 3:
        data = bytearray(path.read_bytes())
        data[4:8] = variant.version.to_bytes(4, "little")
        path.write_bytes(bytes(data))
    return path


# the engine's messages, and which key (or tensor) each one names
ENGINE_MESSAGES = [
    (r"required tensor is missing: (\S+)", None),
    (r"required metadata key is missing: (\S+)", "{}"),
    (r"expected (\S+?)=\S+ for DeepSeek4 Flash", "deepseek4.{}"),
    (r"metadata key has a non-(?:integer|float) type(?: \d+)?: (\S+)", "{}"),
    (r"required (?:int32/uint32|float) array metadata key is missing: (\S+)", "{}"),
    (r"(deepseek4\.\S+) is shorter than the layer count", "{}"),
    (r"unexpected DeepSeek4 (compression ratio) at layer", "deepseek4.attention.compress_ratios"),
    (r"metadata array contains (a negative value)", "deepseek4.attention.compress_ratios"),
    (r"GGUF tokenizer (token) table is missing or invalid", TOKENIZER["tokens"]),
    (r"GGUF tokenizer (merge) table is missing or invalid", TOKENIZER["merges"]),
    (r"required tokenizer token is missing: (.+)", TOKENIZER["tokens"]),
    (r"(only GGUF v3 is supported)", "GGUF version"),
]


def engine_verdict(last_line: str) -> str:
    """ACCEPTED, or the key the engine's refusal names."""
    for pattern, key in ENGINE_MESSAGES:
        match = re.search(pattern, last_line)
        if match:
            if key is None:
                # the metadata passed; a main model that lacks even the first tensor is not one
                return "tensor " + match.group(1) if match.group(1) == K["gguf"]["first_tensor"] else ACCEPTED
            return key.format(match.group(1))
    raise AssertionError(f"an engine message this test does not know: {last_line!r}")


def our_verdict(path: Path) -> str:
    ident = identify(path)
    if ident.kind == "main":
        return ACCEPTED
    if ident.kind in ("mtp", "dspark"):
        return f"refused as {ident.kind}"
    return ident.problems[0].split(":")[0]


def sim_last_line(path: Path) -> str:
    """The simulated engine's checks, in-process (the same code its ds4-server runs): its last line."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            sim.validate_main(sim.read_gguf(str(path)))
        except SystemExit as exc:
            assert exc.code == 1, err.getvalue()
            return err.getvalue().strip().splitlines()[-1]
    return "(accepted)"


@pytest.fixture(scope="module")
def real_verdicts(engine, tmp_path_factory):
    """Run the real ds4-server once per variant: {name: (path, exit status, last line of stderr)}."""
    folder = tmp_path_factory.mktemp("variants")
    lock = folder / "ds4.lock"
    results = {}
    for number, variant in enumerate(VARIANTS):
        path = write(variant, folder / f"v{number}.gguf")
        proc = engine.run_server("-m", path, "--port", "1", lock=lock)
        results[variant.name] = (path, proc.returncode, proc.stderr.strip().splitlines()[-1])
    return results


def test_the_variants_cover_every_key_and_type():
    names = {v.name for v in VARIANTS}
    for key in RULES["keys"]:
        assert f"{key} missing" in names
    assert len(VARIANTS) > 150


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_ds4_converge_agrees_with_the_real_engine(real_verdicts, variant):
    path, status, last = real_verdicts[variant.name]
    assert status == 1, last  # every variant ends at the engine's model checks
    real = engine_verdict(last)
    ours = our_verdict(path)
    if real.startswith("tensor "):
        # metadata the engine takes, without the main model's first tensor: an MTP head given as the main model
        assert ours == "refused as mtp", (last, identify(path))
    elif variant.arch == K["dspark_drafter"]["architecture"] or variant.name == "an MTP head":
        assert real != ACCEPTED and ours.startswith("refused as"), (last, ours)
    else:
        assert ours == real, (last, identify(path).problems)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_the_simulator_says_what_the_real_engine_says(real_verdicts, variant):
    path, _status, last = real_verdicts[variant.name]
    sim_line = sim_last_line(path)
    if "required tensor is missing" in last:
        assert sim_line == "(accepted)", sim_line  # the simulated model has no tensors to bind
    else:
        assert sim_line == last


def test_the_shipped_tiny_models_are_what_the_real_engine_takes(engine, lock):
    for name in ("tiny-ds4flash.gguf", "tiny-ds4flash-0731.gguf"):
        proc = engine.run_server("-m", REPO / "engine" / "models" / name, lock=lock)
        assert proc.returncode == 1 and "ds4: required tensor is missing: output_hc_base.weight" in proc.stderr
        assert identify(REPO / "engine" / "models" / name).kind == "main"


@pytest.mark.parametrize("what", ["missing", "empty", "too small", "zeros", "version 2", "truncated tensor data"])
def test_files_that_are_not_models_fail_alike(engine, lock, tmp_path, what):
    path = tmp_path / "model.gguf"
    good = (REPO / "engine" / "models" / "tiny-ds4flash.gguf").read_bytes()
    content = {"missing": None, "empty": b"", "too small": b"GGUF12345", "zeros": b"\0" * 100,
               "version 2": good[:4] + (2).to_bytes(4, "little") + good[8:], "truncated tensor data": good[:-40]}[what]
    if content is not None:
        path.write_bytes(content)
    real = engine.run_server("-m", path, lock=lock)
    assert real.returncode == 1
    last = real.stderr.strip().splitlines()[-1]
    assert sim_last_line(path) == last
    assert identify(path).kind == "unknown"
