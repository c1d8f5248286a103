"""Model metadata: for every variant of a synthetic GGUF, ds4-converge's verdict is the real engine's, per version.

The real ds4-server accepted a file's metadata when it gets as far as binding tensors ("ds4: required tensor is
missing: …", exit 1): our tiny files carry two tensors only. Otherwise it refused, naming a key; ds4-converge,
judging by the rules it knows for that version, must refuse too, naming the same key first. Each variant runs
through both upstream versions (a run takes milliseconds). The simulated engine (engine/sim), which plays
8d57664 in the end-to-end tests, must print the very same last line as 8d57664.
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

from ds4_converge.engine_knowledge import BASE, FORK, for_version  # noqa: E402
from ds4_converge.engine_knowledge import load as load_knowledge  # noqa: E402
from ds4_converge.models.gguf import identify  # noqa: E402

K = load_knowledge()  # the variants are made from the base (8d57664) rules; each version judges them
RULES = K["gguf"]["main_model"]
LAYERS = RULES["layers"]
TOKENIZER = K["gguf"]["tokenizer"]
ACCEPTED = "accepted"

pytestmark = pytest.mark.slow  # runs each real ds4-server some 260 times (about 10 s in all)


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
    fork = for_version(FORK)["gguf"]["dspark_drafter"]
    found.append(Variant("a DSpark drafter (the fork's)", tiny_gguf.dspark_kv(), ["dspark.0.attn_norm.weight"],
                         arch=fork["architecture"]))
    # b030961 picks a shape from the metadata: DeepSeek V4 Pro is one it knows (and the tool does not serve)
    pro = dict(for_version("b030961")["gguf"]["main_model"]["other_shapes"]["DeepSeek V4 Pro"])
    layers = pro["deepseek4.block_count"]
    pro["deepseek4.attention.compress_ratios"] = Value(  # ds4_expected_layer_compress_ratio() for PRO
        T.ARRAY, [128 if il < 2 else (4 if il % 2 == 0 else 128) for il in range(layers)], T.UINT32)
    pro["deepseek4.swiglu_clamp_exp"] = Value(T.ARRAY, [10.0] * layers, T.FLOAT32)
    pro["deepseek4.expert_weights_scale"] = Value(T.FLOAT32, 2.5)
    found.append(_with("the DeepSeek V4 Pro shape", **pro))
    found.append(_with("two shape keys wrong", **{"deepseek4.block_count": 61, "deepseek4.expert_count": 384}))
    return found


VARIANTS = variants()


def write(variant: Variant, path: Path) -> Path:
    tiny_gguf.write(path, variant.arch, variant.kv, variant.tensors)
    if variant.version != 3:
        data = bytearray(path.read_bytes())
        data[4:8] = variant.version.to_bytes(4, "little")
        path.write_bytes(bytes(data))
    return path


# the engine's messages, and which key (or tensor) each one names ({shape}: the version's shape name)
ENGINE_MESSAGES = [
    (r"required tensor is missing: (\S+)", None),
    (r"required metadata key is missing: (\S+)", "{}"),
    (r"expected (\S+?)=\S+ for {shape}, got", "deepseek4.{}"),
    (r"metadata key has a non-(?:integer|float) type(?: \d+)?: (\S+)", "{}"),
    (r"required (?:int32/uint32|float) array metadata key is missing: (\S+)", "{}"),
    (r"(deepseek4\.\S+) is shorter than the layer count", "{}"),
    (r"unexpected DeepSeek4 (compression ratio) at layer", "deepseek4.attention.compress_ratios"),
    (r"metadata array contains (a negative value)", "deepseek4.attention.compress_ratios"),
    (r"GGUF tokenizer (token) table is missing or invalid", TOKENIZER["tokens"]),
    (r"GGUF tokenizer (merge) table is missing or invalid", TOKENIZER["merges"]),
    (r"required tokenizer token is missing: (.+)", TOKENIZER["tokens"]),
    (r"(only GGUF v3 is supported)", "GGUF version"),
    (r"(unsupported DeepSeek4 shape): ", "DeepSeek4 shape"),
]


def engine_verdict(last_line: str, knowledge: dict) -> str:
    """ACCEPTED, or the key the engine's refusal names."""
    shape = re.escape(knowledge["gguf"]["main_model"]["shape_name"])
    for pattern, key in ENGINE_MESSAGES:
        match = re.search(pattern.replace("{shape}", shape), last_line)
        if match:
            if key is None:
                # the metadata passed; a main model that lacks even the first tensor is not one
                return "tensor " + match.group(1) if match.group(1) == K["gguf"]["first_tensor"] else ACCEPTED
            return key.format(match.group(1))
    raise AssertionError(f"an engine message this test does not know: {last_line!r}")


def our_verdict(path: Path, knowledge: dict) -> str:
    ident = identify(path, knowledge)
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


_RUNS: dict[str, dict] = {}


def _verdicts(engine, folder: Path) -> dict:
    """Run one real ds4-server once per variant: {name: (path, exit status, last line of stderr)}."""
    if engine.version not in _RUNS:
        lock = folder / "ds4.lock"
        results = {}
        for number, variant in enumerate(VARIANTS):
            path = write(variant, folder / f"v{number}.gguf")
            proc = engine.run_server("-m", path, "--port", "1", lock=lock)
            results[variant.name] = (path, proc.returncode, proc.stderr.strip().splitlines()[-1])
        _RUNS[engine.version] = results
    return _RUNS[engine.version]


@pytest.fixture(scope="module")
def real_verdicts(each_engine, tmp_path_factory):
    return each_engine, _verdicts(each_engine, tmp_path_factory.mktemp(f"variants-{each_engine.version}"))


@pytest.fixture(scope="module")
def base_verdicts(engine, tmp_path_factory):
    """8d57664's verdicts: the version the simulator plays."""
    return _verdicts(engine, tmp_path_factory.mktemp("variants-base"))


def test_the_variants_cover_every_key_and_type():
    names = {v.name for v in VARIANTS}
    for key in RULES["keys"]:
        assert f"{key} missing" in names
    assert len(VARIANTS) > 150


# where ds4-converge refuses what the engine takes, on purpose
TOOL_POLICY = {"the DeepSeek V4 Pro shape": "DeepSeek4 shape"}  # b030961 serves PRO; this tool serves Flash


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_ds4_converge_agrees_with_the_real_engine(real_verdicts, variant):
    engine, verdicts = real_verdicts
    knowledge = for_version(engine.version)
    path, status, last = verdicts[variant.name]
    assert status == 1, last  # every variant ends at the engine's model checks
    real = engine_verdict(last, knowledge)
    ours = our_verdict(path, knowledge)
    tokenizer_late = knowledge["gguf"]["tokenizer"]["checked"] == "after_tensors"
    if real.startswith("tensor "):
        # metadata the engine takes, without the main model's first tensor: a support file given as the main model
        # (8d57664: any mtp.0.* tensor makes it an MTP head; b030961 asks for more, so it is no support file)
        assert ours == "refused as mtp" or engine.version != BASE and ours == "support file", (last, ours)
    elif variant.name in ("an MTP head", "a DSpark drafter (the fork's)"):
        assert real != ACCEPTED and ours != ACCEPTED, (last, ours)
    elif real == ACCEPTED and tokenizer_late and ours in (TOKENIZER["tokens"], TOKENIZER["merges"]):
        # b030961 reads the tokenizer once the weights are bound, which the tiny files have not: the engine
        # would refuse it there, and the tool's verdict is 8d57664's, where the tokenizer comes first
        assert ours == our_verdict(path, for_version(BASE)), (last, ours)
    elif variant.name in TOOL_POLICY and real == ACCEPTED and engine.version != BASE:
        assert ours == TOOL_POLICY[variant.name], (last, identify(path, knowledge).problems)
    else:
        assert ours == real, (last, identify(path, knowledge).problems)


def test_the_versions_differ_where_the_knowledge_says(real_verdicts):
    """The premise of knowing rules per version: b030961 takes a file without the four rope keys that 8d57664
    requires, and words a wrong shape key as an unsupported shape."""
    engine, verdicts = real_verdicts
    rope = [v.name for v in VARIANTS if v.name.startswith("deepseek4.rope.scaling.") and v.name.endswith(" missing")]
    assert len(rope) == 4
    wanted = ACCEPTED if engine.version == "b030961" else None
    for name in rope:
        real = engine_verdict(verdicts[name][2], for_version(engine.version))
        assert (real == ACCEPTED) == (wanted == ACCEPTED), (name, real)
    block = engine_verdict(verdicts["deepseek4.block_count = 44 (UINT32)"][2], for_version(engine.version))
    assert block == ("DeepSeek4 shape" if engine.version == "b030961" else "deepseek4.block_count")


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_the_simulator_says_what_the_real_engine_says(base_verdicts, variant):
    path, _status, last = base_verdicts[variant.name]
    sim_line = sim_last_line(path)
    if "required tensor is missing" in last:
        assert sim_line == "(accepted)", sim_line  # the simulated model has no tensors to bind
    else:
        assert sim_line == last


def test_the_shipped_tiny_models_are_what_the_real_engine_takes(each_engine, lock):
    for name in ("tiny-ds4flash.gguf", "tiny-ds4flash-0731.gguf"):
        proc = each_engine.run_server("-m", REPO / "engine" / "models" / name, lock=lock)
        assert proc.returncode == 1 and "ds4: required tensor is missing: output_hc_base.weight" in proc.stderr
        assert identify(REPO / "engine" / "models" / name, for_version(each_engine.version)).kind == "main"


@pytest.mark.parametrize("what", ["missing", "empty", "too small", "zeros", "version 2", "truncated tensor data"])
def test_files_that_are_not_models_fail_alike(each_engine, lock, tmp_path, what):
    path = tmp_path / "model.gguf"
    good = (REPO / "engine" / "models" / "tiny-ds4flash.gguf").read_bytes()
    content = {"missing": None, "empty": b"", "too small": b"GGUF12345", "zeros": b"\0" * 100,
               "version 2": good[:4] + (2).to_bytes(4, "little") + good[8:], "truncated tensor data": good[:-40]}[what]
    if content is not None:
        path.write_bytes(content)
    real = each_engine.run_server("-m", path, lock=lock)
    assert real.returncode == 1
    last = real.stderr.strip().splitlines()[-1]
    if each_engine.version == BASE:
        assert sim_last_line(path) == last
    assert identify(path, for_version(each_engine.version)).kind == "unknown"
