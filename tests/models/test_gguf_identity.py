import gguf
import pytest

import make_tiny_gguf as tiny_gguf
from ds4_converge.engine_knowledge import FORK, for_version
from ds4_converge.engine_knowledge import load as load_knowledge
from ds4_converge.models import gguf as gguf_rules
from ds4_converge.models.gguf import check_model_set, read_gguf_header
from make_tiny_gguf import T, Value


def identify(path, knowledge=None):
    """Files judged by the fork's rules (every 8d57664 rule, plus its drafter and generations) unless told."""
    return gguf_rules.identify(path, knowledge or for_version(FORK))


@pytest.mark.parametrize("name, kind, generation, arch", [
    ("main", "main", "legacy", "deepseek4"),
    ("main_0731", "main", "0731", "deepseek4"),
    ("mtp", "mtp", "legacy", "deepseek4"),
    ("dspark_legacy", "dspark", "legacy", "deepseek4-dspark"),
    ("dspark_0731", "dspark", "0731", "deepseek4-dspark"),
])
def test_identify_kinds(gguf_files, name, kind, generation, arch):
    ident = identify(getattr(gguf_files, name))
    assert (ident.kind, ident.generation, ident.architecture, ident.problems) == (kind, generation, arch, [])


def test_wrong_value_is_listed_with_expected_and_got(gguf_files):
    ident = identify(gguf_files.main_bad_block_count)
    assert ident.kind == "unknown"
    assert ident.problems == ["deepseek4.block_count: expected 43, got 61"]


def test_every_problem_is_listed_in_the_engines_order(tmp_path, write_gguf):
    kv = tiny_gguf.main_model_kv()
    del kv["deepseek4.expert_weights_norm"]
    kv["deepseek4.expert_weights_scale"] = 2.5
    ident = identify(write_gguf(tmp_path / "x.gguf", "deepseek4", kv, ["blk.0.x"]))
    assert ident.kind == "unknown"
    assert ident.problems == ["deepseek4.expert_weights_scale: expected 1.5, got 2.5",
                              "deepseek4.expert_weights_norm: missing (expected true)"]


def test_the_indexer_keys_are_the_ones_under_attention(tmp_path, write_gguf):
    """The real engine reads deepseek4.attention.indexer.*; the old deepseek4.indexer.* names (which this tool once
    required) count for nothing."""
    kv = tiny_gguf.main_model_kv()
    assert identify(write_gguf(tmp_path / "ok.gguf", "deepseek4", kv, ["blk.0.x"])).kind == "main"
    moved = {k.replace(".attention.indexer.", ".indexer."): v for k, v in kv.items()}
    ident = identify(write_gguf(tmp_path / "old.gguf", "deepseek4", moved, ["blk.0.x"]))
    assert [p.split(":")[0] for p in ident.problems] == [
        "deepseek4.attention.indexer.head_count", "deepseek4.attention.indexer.key_length",
        "deepseek4.attention.indexer.top_k"]


@pytest.mark.parametrize("key, value, problem", [
    ("deepseek4.block_count", Value(T.INT32, 43), "has type INT32; the engine reads it only as UINT32"),
    ("deepseek4.block_count", Value(T.UINT64, 43), "has type UINT64; the engine reads it only as UINT32"),
    ("deepseek4.rope.scaling.original_context_length", Value(T.FLOAT32, 65536.0),
     "has type FLOAT32; the engine reads it only as UINT64 or UINT32"),
    ("deepseek4.expert_weights_norm", Value(T.UINT32, 1), "has type UINT32; the engine reads it only as BOOL"),
    ("deepseek4.rope.freq_base", Value(T.STRING, "10000"), "has type STRING; the engine reads it only as "
                                                           "FLOAT32 or FLOAT64 or UINT32 or INT32"),
    ("deepseek4.attention.compress_ratios", Value(T.ARRAY, [0.0] * 43, T.FLOAT32),
     "the engine needs an array of UINT32 or INT32, got an array of FLOAT32"),
    ("deepseek4.attention.compress_ratios", Value(T.ARRAY, [0, 0, 4], T.UINT32),
     "has 3 elements, shorter than the 43 layers"),
    ("deepseek4.attention.compress_ratios", Value(T.ARRAY, [0, 0, -4] + [0] * 40, T.INT32),
     "layer 2 has a negative value -4"),
    ("deepseek4.attention.compress_ratios", Value(T.ARRAY, [0, 0, 128] + [4] * 40, T.UINT32),
     "layer 2: expected 4, got 128"),
    ("deepseek4.swiglu_clamp_exp", Value(T.ARRAY, [10.0] * 42 + [7.0], T.FLOAT64), "layer 42: expected 10, got 7"),
    ("deepseek4.swiglu_clamp_exp", 10.0, "the engine needs an array of FLOAT32 or FLOAT64, got FLOAT32"),
])
def test_types_and_arrays_are_read_like_the_engine(tmp_path, write_gguf, key, value, problem):
    kv = {**tiny_gguf.main_model_kv(), key: value}
    ident = identify(write_gguf(tmp_path / "x.gguf", "deepseek4", kv, ["blk.0.x"]))
    assert ident.problems == [f"{key}: {problem}"]


@pytest.mark.parametrize("key, value", [
    ("deepseek4.rope.scaling.original_context_length", Value(T.UINT32, 65536)),
    ("deepseek4.rope.freq_base", Value(T.FLOAT64, 10000.0)),
    ("deepseek4.rope.freq_base", Value(T.UINT32, 10000)),
    ("deepseek4.rope.scaling.factor", Value(T.INT32, 16)),
    ("deepseek4.rope.freq_base", Value(T.FLOAT32, 10000.009)),   # within max(|v|,1) * 1e-6
    ("deepseek4.attention.compress_ratios", Value(T.ARRAY, [0, 0] + [4, 128] * 20 + [4, 7, 7], T.INT32)),
    ("deepseek4.expert_group_count", Value(T.INT32, 5)),          # optional: another type reads as 0
])
def test_what_the_engine_also_accepts(tmp_path, write_gguf, key, value):
    kv = {**tiny_gguf.main_model_kv(), key: value}
    assert identify(write_gguf(tmp_path / "x.gguf", "deepseek4", kv, ["blk.0.x"])).problems == []


def test_float_tolerance_is_the_engines():
    from ds4_converge.models.gguf import _same_f32

    assert _same_f32(1.5000014, 1.5) and not _same_f32(1.5000017, 1.5)
    assert _same_f32(1.0e-6 + 9e-7, 1.0e-6) and not _same_f32(1.0e-6 + 1.2e-6, 1.0e-6)


def test_tokenizer_is_checked_first_and_its_special_tokens(tmp_path, write_gguf):
    kv = tiny_gguf.main_model_kv()
    del kv["tokenizer.ggml.merges"]
    kv["tokenizer.ggml.tokens"] = Value(T.ARRAY, ["<think>", "</think>"] + [f"t{i}" for i in range(100)], T.STRING)
    kv["deepseek4.block_count"] = 61
    problems = identify(write_gguf(tmp_path / "x.gguf", "deepseek4", kv, ["blk.0.x"])).problems
    assert problems[0] == "tokenizer.ggml.merges: missing (the engine reads the tokenizer before anything else)"
    assert problems[1].startswith("tokenizer.ggml.tokens: special token(s) <｜begin▁of▁sentence｜>, ")
    assert "<think>" not in problems[1] and problems[2] == "deepseek4.block_count: expected 43, got 61"


def test_an_mtp_head_with_main_metadata_is_still_an_mtp_head(tmp_path, write_gguf):
    path = write_gguf(tmp_path / "mtp.gguf", "deepseek4", tiny_gguf.main_model_kv(), tiny_gguf.mtp_tensors())
    assert identify(path).kind == "mtp"


def test_a_non_gguf_file_is_unknown_not_a_crash(gguf_files, tmp_path):
    ident = identify(gguf_files.not_gguf)
    assert ident.kind == "unknown" and "not a readable GGUF file" in ident.problems[0]
    (tmp_path / "empty.gguf").write_bytes(b"")
    assert identify(tmp_path / "empty.gguf").kind == "unknown"
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(gguf_files.main.read_bytes()[:200])
    assert "truncated" in identify(truncated).problems[0]


def test_truncated_tensor_data_is_refused_like_the_engine_does(gguf_files, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(gguf_files.main.read_bytes()[:-40])
    ident = identify(cut)
    size = cut.stat().st_size
    assert ident.kind == "unknown"
    assert ident.problems == [f"tensor data: blk.0.attn_norm.weight ends at byte {size + 40} but the file has "
                              f"{size} bytes (truncated)"]


def test_header_reader_agrees_with_gguf_reader(gguf_files):
    for path in vars(gguf_files).values():
        if path == gguf_files.not_gguf:
            continue
        reference = gguf.GGUFReader(path)
        header = read_gguf_header(path)
        expected = {k: f.contents() for k, f in reference.fields.items()
                    if k not in ("GGUF.tensor_count", "GGUF.kv_count")}
        assert header.values() == expected
        assert {k: f.type for k, f in header.fields.items()} == {
            k: f.types[0] for k, f in reference.fields.items() if k in header.fields}
        assert header.tensor_names == [t.name for t in reference.tensors]


def test_big_arrays_are_skipped_not_decoded_but_special_tokens_are_found(tmp_path, write_gguf):
    kv = {**tiny_gguf.main_model_kv(), "tokenizer.ggml.tokens": Value(
        T.ARRAY, [f"t{i}" for i in range(5000)] + load_knowledge()["gguf"]["tokenizer"]["special_tokens"], T.STRING),
          "tokenizer.ggml.scores": [0.5] * 5000}
    path = write_gguf(tmp_path / "vocab.gguf", "deepseek4", kv, ["blk.0.x", "blk.1.x"])
    header = read_gguf_header(path, watch=["<think>", "nope"])
    assert header.fields["tokenizer.ggml.tokens"].value == "<array of 5007>"
    assert header.fields["tokenizer.ggml.tokens"].found == {"<think>"}
    assert header.tensor_names == ["blk.0.x", "blk.1.x"] and identify(path).kind == "main"


# ------------------------------------------------------------------------------------- model sets

def test_good_sets(gguf_files):
    main, main_0731 = identify(gguf_files.main), identify(gguf_files.main_0731)
    assert check_model_set(main) == []
    assert check_model_set(main, mtp=identify(gguf_files.mtp)) == []
    assert check_model_set(main, dspark=identify(gguf_files.dspark_legacy)) == []
    assert check_model_set(main_0731, dspark=identify(gguf_files.dspark_0731)) == []


def test_mtp_given_as_main_says_what_it_is(gguf_files):
    (error,) = check_model_set(identify(gguf_files.mtp))
    assert error.endswith("mtp.gguf is an MTP draft head, not the main model")


def test_drafter_given_as_main_says_what_it_is(gguf_files):
    (error,) = check_model_set(identify(gguf_files.dspark_legacy))
    assert "is a DSpark drafter (deepseek4-dspark), not the main model" in error


def test_wrong_main_lists_its_problems(gguf_files):
    (error,) = check_model_set(identify(gguf_files.main_bad_block_count))
    assert "is not a DeepSeek-V4-Flash main model: deepseek4.block_count: expected 43, got 61" in error


def test_0731_base_with_mtp_is_refused(gguf_files):
    (error,) = check_model_set(identify(gguf_files.main_0731), mtp=identify(gguf_files.mtp))
    assert "0731-generation base, which has no MTP head" in error


@pytest.mark.parametrize("base, drafter", [("main", "dspark_0731"), ("main_0731", "dspark_legacy")])
def test_drafter_generation_must_match_base(gguf_files, base, drafter):
    (error,) = check_model_set(identify(getattr(gguf_files, base)), dspark=identify(getattr(gguf_files, drafter)))
    assert "-generation but the base" in error and "use the drafter built for the base" in error


def test_files_in_the_wrong_slot_are_named(gguf_files):
    errors = check_model_set(identify(gguf_files.main), mtp=identify(gguf_files.dspark_legacy),
                             dspark=identify(gguf_files.mtp))
    assert any("was given as the MTP file but is a DSpark drafter" in e for e in errors)
    assert any("was given as the DSpark drafter but is an MTP draft head" in e for e in errors)
