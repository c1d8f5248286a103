"""engine/knowledge/ds4.yaml against the real upstream source it was read from (ds4.c, ds4_server.c, Makefile).

The knowledge file is the one place the code takes engine facts from; each upstream fact in it is checked here,
so a wrong paraphrase fails a test instead of a deployment.
"""
from __future__ import annotations

import re

import pytest

from ds4_converge.engine_knowledge import load as load_knowledge

K = load_knowledge()
GGUF = K["gguf"]


@pytest.fixture(scope="module")
def ds4_c(engine) -> str:
    return engine.source("ds4.c")


@pytest.fixture(scope="module")
def server_c(engine) -> str:
    return engine.source("ds4_server.c")


def body(source: str, signature: str) -> str:
    """The text of one C function, from its signature to the closing brace at the start of a line."""
    start = source.index(signature)
    return source[start:source.index("\n}\n", start)]


def test_it_names_the_source_it_was_read_from(engine):
    assert K["upstream"]["commit"] in engine.tarball.name


def test_make_targets_and_binaries(engine):
    makefile = engine.source("Makefile")
    phony = re.search(r"^\.PHONY:(.*)$", makefile, re.M).group(1).split()
    assert set(K["make_targets"]) <= set(phony)
    for target in K["make_targets"]:
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), target
    assert all((engine.tree / binary).is_file() for binary in K["binaries"])  # what `make cpu` built


def test_model_id_and_the_non_thinking_model(server_c):
    assert '"{\\"id\\":\\"%s\\",' % K["model_id"] in server_c
    assert f'"/v1/models/{K["model_id"]}"' in server_c
    assert f'"{K["api"]["non_thinking_model"]}"' in server_c


def test_lock(ds4_c):
    lock = body(ds4_c, "static void ds4_acquire_instance_lock(void)")
    assert f'getenv("{K["lock"]["env"]}")' in lock and f'"{K["lock"]["default_file"]}"' in lock
    held = lock[lock.index("already running"):lock.index("failed to lock")]
    assert re.search(rf"exit\({K['lock']['held_exit']}\);", held)


def test_exit_codes(server_c):
    parse = body(server_c, "static server_config parse_options(int argc, char **argv)")
    unknown = parse[parse.index('"ds4-server: unknown option: %s"'):]
    assert f"exit({K['exit_codes']['usage']});" in unknown[:unknown.index("}")]
    assert "exit(0);" in parse[:parse.index("--model")]  # --help
    handler = body(server_c, "static void stop_signal_handler(int sig)")
    assert f"_exit({K['exit_codes']['second_signal']})" in handler


def test_server_defaults(server_c):
    assert f"Default when enabled: {K['server_defaults']['kv_disk_space_mb']}" in server_c


def test_gguf_version(ds4_c):
    assert f"m->version != {GGUF['version']}" in ds4_c


@pytest.mark.parametrize("kind, reader, getter", [
    ("u32", "static uint32_t required_u32(", "static bool model_get_u32("),
    ("u64", "static uint64_t required_u64(", None),
    ("f32", "static float required_f32(", None),
    ("bool", "static bool required_bool(", "static bool model_get_bool("),
])
def test_value_kinds_are_the_types_the_readers_take(ds4_c, kind, reader, getter):
    text = body(ds4_c, reader) + (body(ds4_c, getter) if getter else "")
    accepted = re.findall(r"GGUF_VALUE_([A-Z0-9]+)", text)
    assert sorted(set(accepted)) == sorted(GGUF["value_kinds"][kind])
    assert accepted[:len(GGUF["value_kinds"][kind])] == GGUF["value_kinds"][kind]  # in the engine's order


def test_tokenizer(ds4_c):
    vocab = body(ds4_c, "static void vocab_load(ds4_vocab *vocab, const ds4_model *model)")
    arrays = re.findall(r'model_get_array\(model, "([^"]+)"', vocab)
    assert arrays == [GGUF["tokenizer"]["tokens"], GGUF["tokenizer"]["merges"]]
    assert re.findall(r'vocab_lookup\(vocab, "([^"]+)"\)', vocab) == GGUF["tokenizer"]["special_tokens"]


def _constants(ds4_c: str) -> dict[str, float]:
    values = {name: float(v) for name, v in re.findall(r"^\s+(DS4_N_[A-Z_]+)\s+=\s+(\d+),", ds4_c, re.M)}
    values.update({name: float(v.rstrip("f")) for name, v in
                   re.findall(r"^#define (DS4_[A-Z_]+)\s+\(\s*([-0-9.e]+f?)\s*\)", ds4_c, re.M)})
    values["DS4_ROPE_ORIG_CTX"] = float(re.search(r"#define DS4_ROPE_ORIG_CTX\s+UINT64_C\((\d+)\)", ds4_c).group(1))
    return values


def test_main_model_keys_kinds_and_values(ds4_c):
    validate = body(ds4_c, "static void config_validate_model(const ds4_model *m)")
    constants = _constants(ds4_c)
    read = {key: kind for kind, key in re.findall(r'required_(u32|u64|f32|bool)\(m, "([^"]+)"\)', validate)}
    optional = re.findall(r'model_get_u32\(m, "([^"]+)"', validate)
    arrays = {}
    for function in ("static void validate_compress_ratio_metadata(", "static void validate_swiglu_clamp_metadata("):
        text = body(ds4_c, function)
        key = re.search(r'const char \*key = "([^"]+)"', text).group(1)
        arrays[key] = [t for t in re.findall(r"arr\.type != GGUF_VALUE_([A-Z0-9]+)", text)]
    keys = GGUF["main_model"]["keys"]
    assert {k for k, r in keys.items() if r["kind"] not in ("array",) and not r.get("optional")} == set(read)
    assert {k for k, r in keys.items() if r.get("optional")} == set(optional)
    assert {k for k, r in keys.items() if r["kind"] == "array"} == set(arrays)
    for key, kind in read.items():
        assert keys[key]["kind"] == kind, key
    for key, items in arrays.items():
        assert keys[key]["items"] == items, key

    # the expected values: config_expect_*("name", got, CONSTANT) and the literal checks
    expected = {f"deepseek4.{name}": constants[const] for name, const in
                re.findall(r'config_expect_(?:u32|f32)\("([^"]+)",\s+\w+,\s+(DS4_[A-Z_]+)\)', ds4_c)}
    expected.update({f"deepseek4.{name}": float(v) for name, v in
                     re.findall(r'config_expect_u32\("([^"]+)",\s+\w+,\s+(\d+)\)', validate)})
    expected["deepseek4.rope.scaling.original_context_length"] = constants["DS4_ROPE_ORIG_CTX"]
    assert "config_expect_bool(\"expert_weights_norm\", expert_weight_norm, true)" in validate
    expected["deepseek4.expert_weights_norm"] = True
    for key, rule in keys.items():
        if rule["kind"] == "array":
            continue
        assert expected[key] == rule["value"], key
    assert GGUF["main_model"]["layers"] == constants["DS4_N_LAYER"]
    assert keys["deepseek4.swiglu_clamp_exp"]["each"] == constants["DS4_SWIGLU_CLAMP_EXP"]


def test_compress_ratios_follow_the_engines_layout(ds4_c):
    layout = body(ds4_c, "static uint32_t ds4_layer_compress_ratio(uint32_t il)")
    assert "if (il < 2) return 0;" in layout and "return (il & 1u) == 0 ? 4u : 128u;" in layout
    values = GGUF["main_model"]["keys"]["deepseek4.attention.compress_ratios"]["values"]
    assert values == [0 if il < 2 else (4 if il % 2 == 0 else 128) for il in range(len(values))]


def test_the_order_of_checks_is_the_engines(ds4_c):
    """The knowledge lists keys in the order their values are checked, so the first problem is the engine's."""
    validate = body(ds4_c, "static void config_validate_model(const ds4_model *m)")
    checks = re.findall(r'config_expect_(?:u32|f32|bool)\("([^"]+)"|validate_(compress_ratio|swiglu_clamp)_metadata'
                        r'|required_u64\(m, "deepseek4\.(rope\.scaling\.original_context_length)"', validate)
    names = [next(x for x in found if x) for found in checks]
    names = [{"compress_ratio": "attention.compress_ratios", "swiglu_clamp": "swiglu_clamp_exp"}.get(n, n)
             for n in names]
    order = [k.removeprefix("deepseek4.") for k in GGUF["main_model"]["keys"]]
    # block_count is read first and checked late (config_validate_fixed_shape): the knowledge lists it first
    assert [n for n in names if n != "block_count"] == [n for n in order if n != "block_count"]


def test_first_tensor_and_mtp_tensors(ds4_c):
    bind = body(ds4_c, "static void weights_bind(ds4_weights *w, const ds4_model *m)")
    assert re.search(r'required_tensor\(m, "([^"]+)"\)', bind).group(1) == GGUF["first_tensor"]
    mtp = body(ds4_c, "static void mtp_weights_bind(ds4_mtp_weights *w, const ds4_model *m)")
    names = re.findall(r'required_tensor\(m, "([^"]+)"\)', mtp)
    assert names and all(n.startswith(GGUF["mtp_tensor_prefix"]) for n in names)


def test_fork_facts_are_absent_from_upstream(ds4_c, server_c):
    assert K["dspark_drafter"]["architecture"] not in ds4_c + server_c
    assert K["generation"]["variant_key"] not in ds4_c + server_c
    for flag in K["flags"]["fork_only"]:
        assert f'"{flag}"' not in server_c, flag
