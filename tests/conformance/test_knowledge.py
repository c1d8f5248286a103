"""The engine knowledge of each upstream version against the source and the binary of that version.

engine/knowledge is the one place the code takes engine facts from: ds4.yaml (the base, upstream 8d57664) and
versions.yaml (what differs in b030961, and the fork). Each upstream fact is checked here against the version's
ds4.c, ds4_server.c, Makefile and its built ds4-server, so a wrong paraphrase fails a test instead of a deployment.
The GGUF rules are also checked end to end in test_gguf_conformance.py (every variant through each real binary),
the flags in test_flags_conformance.py.
"""
from __future__ import annotations

import re

import pytest

from ds4_converge.engine_knowledge import BASE, FORK, for_version, known_versions


def knowledge(engine) -> dict:
    return for_version(engine.version)


@pytest.fixture(scope="module")
def ds4_c(each_engine) -> str:
    return each_engine.source("ds4.c")


@pytest.fixture(scope="module")
def server_c(each_engine) -> str:
    return each_engine.source("ds4_server.c")


def body(source: str, signature: str) -> str:
    """The text of one C function, from its signature to the closing brace at the start of a line."""
    start = source.index(signature)
    return source[start:source.index("\n}\n", start)]


def test_each_version_names_the_source_it_was_read_from(each_engine):
    assert knowledge(each_engine)["upstream"]["commit"] == each_engine.version
    assert each_engine.version in each_engine.tarball.name
    assert each_engine.version in known_versions()


def test_make_targets_and_binaries(each_engine):
    k, makefile = knowledge(each_engine), each_engine.source("Makefile")
    phony = re.search(r"^\.PHONY:(.*)$", makefile, re.M).group(1).split()
    assert set(k["make_targets"]) <= set(phony)
    for target in k["make_targets"]:
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), target
    assert all((each_engine.tree / binary).is_file() for binary in k["binaries"])  # what `make cpu` built
    spark = re.search(r"^cuda-spark:\n\t\$\(MAKE\) .*CUDA_ARCH=(\S*)$", makefile, re.M)
    assert spark.group(1) == k["make"]["cuda_spark_arch"]
    cuda = makefile[makefile.index("\ncuda:"):]
    assert re.search(r'-z "\$\(strip \$\(CUDA_ARCH\)\)".*?exit (\d+);', cuda, re.S).group(1) == str(
        k["make"]["cuda_needs_arch_exit"])


def test_log_lines_the_tool_reads(each_engine, server_c):
    for name, line in knowledge(each_engine)["logs"].items():
        if name == "stamp":
            continue  # a pattern, checked on the binary's output below
        assert re.search(r'"' + re.escape(line), server_c), (name, line)
    other = for_version(BASE if each_engine.version != BASE else "b030961")["logs"]["kv_persist"]
    assert other not in server_c  # the shutdown line is worded differently in each version


def test_model_id_and_the_non_thinking_model(each_engine, server_c):
    k = knowledge(each_engine)
    assert f'"{k["model_id"]}"' in server_c and '"/v1/models/' in server_c
    assert f'"{k["api"]["non_thinking_model"]}"' in server_c


def test_lock(each_engine, ds4_c):
    k = knowledge(each_engine)
    lock = body(ds4_c, "static void ds4_acquire_instance_lock(void)")
    assert f'getenv("{k["lock"]["env"]}")' in lock and f'"{k["lock"]["default_file"]}"' in lock
    held = lock[lock.index("already running"):lock.index("failed to lock")]
    assert re.search(rf"exit\({k['lock']['held_exit']}\);", held)


def test_exit_codes(each_engine, server_c, lock):
    codes = knowledge(each_engine)["exit_codes"]
    assert each_engine.run_server("--help", lock=lock).returncode == codes["ok"]
    bogus = each_engine.run_server("--bogus-option", lock=lock)
    assert bogus.returncode == codes["usage"] and "ds4-server: unknown option: --bogus-option" in bogus.stderr
    assert each_engine.run_server("-m", "/nonexistent.gguf", lock=lock).returncode == codes["failed"]
    handler = body(server_c, "static void stop_signal_handler(int sig)")
    assert f"_exit({codes['second_signal']})" in handler


def test_server_defaults(each_engine, lock):
    pages = each_engine.run_server("--help", lock=lock).stdout
    if knowledge(each_engine)["flags"]["help_topics"]:
        pages += each_engine.run_server("--help", "kv-cache", lock=lock).stdout
    assert f"Default when enabled: {knowledge(each_engine)['server_defaults']['kv_disk_space_mb']}" in pages


def test_gguf_version(each_engine, ds4_c):
    assert f"m->version != {knowledge(each_engine)['gguf']['version']}" in ds4_c


# the functions that read each kind of value: (reader, the getter it calls), per version
READERS = {
    BASE: {"u32": ["static uint32_t required_u32(", "static bool model_get_u32("],
           "u64": ["static uint64_t required_u64("], "f32": ["static float required_f32("],
           "bool": ["static bool required_bool(", "static bool model_get_bool("]},
    "b030961": {"u32": ["static uint32_t required_u32(", "static bool model_get_u32("],
                "u64": ["static bool model_get_u64_compat("], "f32": ["static bool model_get_f32_compat("],
                "bool": ["static bool required_bool(", "static bool model_get_bool("]},
}


@pytest.mark.parametrize("kind", ["u32", "u64", "f32", "bool"])
def test_value_kinds_are_the_types_the_readers_take(each_engine, ds4_c, kind):
    text = "".join(body(ds4_c, signature) for signature in READERS[each_engine.version][kind])
    accepted = re.findall(r"GGUF_VALUE_([A-Z0-9]+)", text)
    wanted = knowledge(each_engine)["gguf"]["value_kinds"][kind]
    assert sorted(set(accepted)) == sorted(wanted)
    assert accepted[:len(wanted)] == wanted  # in the engine's order


def test_tokenizer(each_engine, ds4_c):
    tokenizer = knowledge(each_engine)["gguf"]["tokenizer"]
    vocab = body(ds4_c, "static void vocab_load(ds4_vocab *vocab, const ds4_model *model)")
    arrays = re.findall(r'model_get_array\(model, "([^"]+)"', vocab)
    assert arrays == [tokenizer["tokens"], tokenizer["merges"]]
    assert re.findall(r'vocab_lookup\(vocab, "([^"]+)"\)', vocab) == tokenizer["special_tokens"]


def _validator(engine, ds4_c: str) -> str:
    return body(ds4_c, "static void config_validate_model(const ds4_model *m)" if engine.version == BASE
                else "static void config_validate_deepseek4_model(const ds4_model *m)")


def _flash_values(engine, ds4_c: str) -> dict[str, float]:
    """The constants config_expect_*() compares with: #defines (8d57664) or DS4_SHAPE_FLASH's fields (b030961)."""
    values = {name: float(v) for name, v in re.findall(r"^\s+(DS4_N_[A-Z_]+)\s+=\s+(\d+),", ds4_c, re.M)}
    values.update({name: float(v.rstrip("f")) for name, v in
                   re.findall(r"^#define (DS4_[A-Z_]+)\s+\(\s*([-0-9.e]+f?)\s*\)", ds4_c, re.M)})
    orig = re.search(r"#define DS4_(?:DEFAULT_)?ROPE_ORIG_CTX\s+UINT64_C\((\d+)\)", ds4_c).group(1)
    values["DS4_ROPE_ORIG_CTX"] = float(orig)
    if engine.version != BASE:
        fields = _shape_fields(ds4_c, "DS4_SHAPE_FLASH", values)
        for macro, field in re.findall(r"^#define (DS4_[A-Z_]+)\s+\(g_ds4_shape\.(\w+)\)", ds4_c, re.M):
            if field in fields:
                values[macro] = fields[field]
    return values


def _shape_fields(ds4_c: str, name: str, constants: dict) -> dict:
    struct = ds4_c[ds4_c.index(f"static const ds4_shape {name} = {{"):]
    struct = struct[:struct.index("};")]
    fields = {}
    for field, value in re.findall(r"^\s+\.(\w+) = ([^,]+),", struct, re.M):
        value = value.strip()
        if value.startswith('"'):
            fields[field] = value.strip('"')
        elif re.fullmatch(r"[-0-9.e]+f?", value):
            fields[field] = float(value.rstrip("f"))
        elif value in constants:
            fields[field] = constants[value]
    return fields


def test_main_model_keys_kinds_and_values(each_engine, ds4_c):
    model = knowledge(each_engine)["gguf"]["main_model"]
    keys = model["keys"]
    validate = _validator(each_engine, ds4_c)
    constants = _flash_values(each_engine, ds4_c)
    required = {key: kind for kind, key in re.findall(r'required_(u32|u64|f32|bool)\(m, "([^"]+)"\)', validate)}
    optional = dict(re.findall(r'model_get_(u32|u64_compat|f32_compat)\(m, "([^"]+)"', validate))
    optional = {key: kind.removesuffix("_compat") for kind, key in
                re.findall(r'model_get_(u32|u64_compat|f32_compat)\(m, "([^"]+)"', validate)}
    arrays = {}
    for function in ("static void validate_compress_ratio_metadata(", "static void validate_swiglu_clamp_metadata("):
        text = body(ds4_c, function)
        key = re.search(r'const char \*key = "([^"]+)"', text).group(1)
        arrays[key] = re.findall(r"arr\.type != GGUF_VALUE_([A-Z0-9]+)", text)
    assert {k for k, r in keys.items() if r["kind"] != "array" and not r.get("optional")} == set(required)
    assert {k for k, r in keys.items() if r.get("optional")} == set(optional)
    assert {k for k, r in keys.items() if r["kind"] == "array"} == set(arrays)
    for key, kind in {**required, **optional}.items():
        assert keys[key]["kind"] == kind, key
    for key, items in arrays.items():
        assert keys[key]["items"] == items, key
    # the expected values: config_expect_*("name", got, CONSTANT) and the literal checks
    expected = {f"deepseek4.{name}": constants[const] for name, const in
                re.findall(r'config_expect_(?:u32|f32)\("([^"]+)",\s+\w+,\s+(DS4_[A-Z_]+)\)',
                           validate + body(ds4_c, "static void validate_swiglu_clamp_metadata(")
                           + body(ds4_c, "static void config_validate_fixed_shape("))}
    expected.update({f"deepseek4.{name}": float(v) for name, v in
                     re.findall(r'config_expect_u32\("([^"]+)",\s+\w+,\s+(\d+)\)', validate)})
    expected["deepseek4.rope.scaling.original_context_length"] = constants["DS4_ROPE_ORIG_CTX"]
    assert 'config_expect_bool("expert_weights_norm", expert_weight_norm, true)' in validate
    expected["deepseek4.expert_weights_norm"] = True
    for key, rule in keys.items():
        if rule["kind"] != "array":
            assert expected[key] == rule["value"], key
    assert model["layers"] == constants["DS4_N_LAYER"]
    assert keys["deepseek4.swiglu_clamp_exp"]["each"] == constants["DS4_SWIGLU_CLAMP_EXP"]


def test_the_shape_name_in_messages(each_engine, ds4_c):
    name = knowledge(each_engine)["gguf"]["main_model"]["shape_name"]
    if each_engine.version == BASE:
        assert f"for {name}, got" in ds4_c
    else:
        assert _shape_fields(ds4_c, "DS4_SHAPE_FLASH", {})["name"] == name
        assert "#define DS4_MODEL_SHAPE_NAME          (g_ds4_shape.name)" in ds4_c


def test_b030961_picks_its_shape_from_these_keys(engine_b030961):
    ds4_c = engine_b030961.source("ds4.c")
    model = for_version("b030961")["gguf"]["main_model"]
    validate = _validator(engine_b030961, ds4_c)
    variables = dict(re.findall(r'const uint32_t (\w+) = required_u32\(m, "([^"]+)"\)', validate))
    call = validate[validate.index("ds4_select_shape_from_metadata("):]
    arguments = re.findall(r"(\w+)[,)]", call[:call.index(";")])
    assert [variables[a] for a in arguments if a in variables] == model["shape_keys"]
    names = {"DeepSeek V4 Pro": "DS4_SHAPE_PRO"}
    macros = dict((f, m) for m, f in re.findall(r"^#define (DS4_N_[A-Z_]+)\s+\(g_ds4_shape\.(\w+)\)", ds4_c, re.M))
    expect = dict(re.findall(r'config_expect_u32\("([^"]+)",\s+\w+,\s+(DS4_N_[A-Z_]+)\)', validate))
    expect["block_count"] = "DS4_N_LAYER"
    field_of = {f"deepseek4.{name}": next(f for f, m in macros.items() if m == macro) for name, macro in
                expect.items()}
    for shape, overrides in model["other_shapes"].items():
        fields = _shape_fields(ds4_c, names[shape], {})
        assert fields["name"] == shape
        flash = _shape_fields(ds4_c, "DS4_SHAPE_FLASH", {})
        differing = {key for key in model["shape_keys"] if fields[field_of[key]] != flash[field_of[key]]}
        assert differing == set(overrides)
        for key, value in overrides.items():
            assert fields[field_of[key]] == value, key


def test_the_order_of_checks_is_the_engines(each_engine, ds4_c):
    """The knowledge lists keys in the order their values are checked, so the first problem is the engine's."""
    validate = _validator(each_engine, ds4_c)
    checks = re.findall(r'config_expect_(?:u32|f32|bool)\("([^"]+)"|validate_(compress_ratio|swiglu_clamp)_metadata'
                        r'|(config_validate_fixed_shape)\(|model_get_u64_compat\(m, "deepseek4\.(rope\.scaling\.'
                        r'original_context_length)"|required_u64\(m, "deepseek4\.(rope\.scaling\.'
                        r'original_context_length)"', validate)
    names = [next(x for x in found if x) for found in checks]
    names = [{"compress_ratio": "attention.compress_ratios", "swiglu_clamp": "swiglu_clamp_exp",
              "config_validate_fixed_shape": "block_count"}.get(n, n) for n in names]
    keys = knowledge(each_engine)["gguf"]["main_model"]["keys"]
    assert names == [k.removeprefix("deepseek4.") for k in keys]


def test_what_is_read_before_any_check(engine):
    """8d57664 reads the first u32 keys together; a missing one stops it before any value is compared."""
    validate = _validator(engine, engine.source("ds4.c"))
    head = validate[:validate.index("config_expect_")]
    assert re.findall(r'required_u32\(m, "([^"]+)"\)', head) == for_version(BASE)["gguf"]["main_model"]["read_first"]


def test_first_tensor_and_mtp_tensors(engine):
    ds4_c = engine.source("ds4.c")
    gguf = for_version(BASE)["gguf"]
    bind = body(ds4_c, "static void weights_bind(ds4_weights *w, const ds4_model *m)")
    assert re.search(r'required_tensor\(m, "([^"]+)"\)', bind).group(1) == gguf["first_tensor"]
    mtp = body(ds4_c, "static void mtp_weights_bind(ds4_mtp_weights *w, const ds4_model *m)")
    names = re.findall(r'required_tensor\(m, "([^"]+)"\)', mtp)
    assert names and all(n.startswith(gguf["mtp_tensor_prefix"]) for n in names)
    assert gguf["support_detect"] == "prefix" and "support_model_detect" not in ds4_c


def test_b030961_tells_support_files_apart_by_their_tensors(engine_b030961):
    ds4_c = engine_b030961.source("ds4.c")
    support = for_version("b030961")["gguf"]["support_files"]
    detect = body(ds4_c, "static ds4_support_kind support_model_detect(")
    assert f"s.stages >= {support['dspark']['min_stages']}" in detect
    assert re.findall(r'model_find_tensor\(m, "([^"]+)"\)', detect) == support["mtp"]["tensors"]
    for flag, part in (("has_main_proj", ".main_proj."), ("has_markov_head", ".markov_head."),
                       ("has_confidence_head", ".confidence_head.")):
        assert f"s.{flag} &&" in detect or f"s.{flag})" in detect
        assert f'ds4_str_contains(name, "{part}")) s.{flag} = true;' in ds4_c
    assert set(support["dspark"]["needs"]) == {".main_proj.", ".markov_head.", ".confidence_head."}
    stage = body(ds4_c, "static bool ds4_tensor_mtp_stage(ds4_str name, uint32_t *stage)")
    assert f'ds4_str_starts_with(name, "{support["dspark"]["stage_prefix"]}")' in stage


def test_fork_facts_are_absent_from_every_upstream_version(each_engine, ds4_c, server_c):
    fork = for_version(FORK)
    sources = ds4_c + server_c
    assert fork["gguf"]["dspark_drafter"]["architecture"] not in sources
    assert fork["gguf"]["generation"]["variant_key"] not in sources and "0731" not in sources
    assert "dspark_drafter" not in knowledge(each_engine)["gguf"] and "generation" not in knowledge(each_engine)["gguf"]
    upstream = set().union(*(for_version(v)["flags"]["listed"] for v in known_versions() if v != FORK))
    for flag in set(fork["flags"]["listed"]) - upstream:
        assert f'"{flag}"' not in server_c, flag


def test_routes(each_engine, server_c):
    routes = knowledge(each_engine)["routes"]
    for method, paths in routes.items():
        for path in paths:
            exact = f'!strcmp(hr.method, "{method}") && !strcmp(hr.path, "{path}")' in server_c
            alias = path.startswith("/v1/models/") and f'"{path.removeprefix("/v1/models/")}"' in server_c and (
                'model_path_prefix = "/v1/models/"' in server_c)
            assert exact or alias, (method, path)
    served = re.findall(r'!strcmp\(hr\.method, "([A-Z]+)"\) && !strcmp\(hr\.path, "([^"]+)"\)', server_c)
    assert {(m, p) for m, p in served} <= {(m, p) for m, ps in routes.items() for p in ps}
    fork_only = set(for_version(FORK)["routes"]["GET"]) - set(routes["GET"])
    assert {"/metrics", "/v1/stats"} <= fork_only
    for path in fork_only | {"/health"}:
        assert f'"{path}"' not in server_c, path


def test_the_servers_own_lines_carry_the_stamp(each_engine, lock):
    """The tool strips it from the last log line it reports; both versions stamp ds4-server's own lines."""
    proc = each_engine.run_server("--port", "0", "-m", "x.gguf", lock=lock)
    first = proc.stderr.splitlines()[0]
    assert "ds4-server:" in first and re.match(knowledge(each_engine)["logs"]["stamp"], first), first


def test_load_facts_the_memory_budget_reads(each_engine, ds4_c):
    """knowledge `load`: which version prints its own plan; the whole mapping is resident, registered (pinned)
    for CUDA; b030961 repacks expert tensors into device memory on an integrated GPU and leaves the map unpinned."""
    load = knowledge(each_engine)["load"]
    assert load["planned_line"] == ("GiB planned" in ds4_c)
    cuda = each_engine.source("ds4_cuda.cu")
    assert "cudaHostRegister((void *)model_map, (size_t)model_size" in cuda
    integrated = "cudaDevAttrIntegrated" in cuda and "aligned artifacts replace expert residency" in cuda
    assert integrated == (each_engine.version == "b030961")
    assert 0 < load["unified_load_margin"] < 1


def test_the_device_copies_each_version_keeps_on_an_integrated_gpu(each_engine):
    """knowledge `load.integrated_copies`: b030961's Q8_0 aligned artifacts are additive (the raw tensor stays
    served), picked by ds4_repack_q8_candidate's own tests; the expert repacks replace the raw experts byte for
    byte (counted once); 8d57664 builds none."""
    rule = knowledge(each_engine)["load"]["integrated_copies"]
    repack_file = each_engine.tree / "cuda" / "mmq" / "ds4_repack.cu"
    if not repack_file.exists():
        assert rule is None and "ds4_gpu_build_derived_artifacts" not in each_engine.source("ds4_cuda.cu")
        return
    repack = each_engine.source("cuda/mmq/ds4_repack.cu")
    q8 = repack[repack.index("bool ds4_repack_q8_candidate"):]
    q8 = q8[:q8.index("\n}\n")]
    assert "ADDITIVE (raw stays served)" in repack
    assert f"t.type != {rule['ggml_type']}u || t.ndim != {rule['ndim']}u" in q8
    assert f"t.dims[0] % {rule['row_multiple']}u != 0" in q8
    assert rule["min_bytes"] == 2 * 1024 * 1024 and "t.bytes < 2u * 1024u * 1024u" in q8
    assert f"t.bytes % {rule['block_bytes']}u != 0" in q8 and f'find("{rule["except_name"]}")' in q8
    assert re.search(r"byte-neutral\s+(\*\s+)?REPLACE artifacts", repack)  # the q2 experts' repack: counted once
    cuda = each_engine.source("ds4_cuda.cu")
    assert f'getenv("{rule["off_env"]}")' in cuda
    # built only for a whole-model CUDA load (no layer slice, no SSD streaming)
    assert re.search(r"e->backend == DS4_BACKEND_CUDA &&\s+!load_slice && !tp_shard && !e->ssd_streaming\)\s+\{"
                     r"\s+\(void\)ds4_gpu_build_derived_artifacts", each_engine.source("ds4.c"))


def test_the_support_model_is_not_loaded_in_a_distributed_run(engine_b030961):
    """Why `distributed` with speculation is refused at validation (antirez/ds4#877): b030961 opens --mtp only
    when it runs without --role."""
    ds4_c = engine_b030961.source("ds4.c")
    assert re.search(r"if \(opt->mtp_path && opt->mtp_path\[0\] &&\s+opt->distributed\.role == "
                     r"DS4_DISTRIBUTED_NONE\)", ds4_c)


def test_the_trained_context_is_the_rope_scaling_key(each_engine):
    k = knowledge(each_engine)
    key = k["context"]["trained_key"]
    assert key == "deepseek4.rope.scaling.original_context_length"
    assert for_version(BASE)["gguf"]["main_model"]["keys"][key]["value"] == 65536
