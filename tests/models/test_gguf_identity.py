import gguf
import pytest

from ds4_converge.engine_knowledge import load as load_knowledge
from ds4_converge.models.gguf import check_model_set, identify, read_gguf_header


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


def test_every_missing_key_is_listed(tmp_path, write_gguf):
    required = load_knowledge()["main_model_required"]
    kv = {k: v for k, v in required.items() if k != "deepseek4.expert_weights_norm"}
    kv["deepseek4.expert_weights_scale"] = 2.5
    ident = identify(write_gguf(tmp_path / "x.gguf", "deepseek4", kv, ["blk.0.x"]))
    assert ident.kind == "unknown"
    assert ident.problems == ["deepseek4.expert_weights_scale: expected 1.5, got 2.5",
                              "deepseek4.expert_weights_norm: missing (expected true)"]


def test_a_non_gguf_file_is_unknown_not_a_crash(gguf_files, tmp_path):
    ident = identify(gguf_files.not_gguf)
    assert ident.kind == "unknown" and "not a readable GGUF file" in ident.problems[0]
    (tmp_path / "empty.gguf").write_bytes(b"")
    assert identify(tmp_path / "empty.gguf").kind == "unknown"
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(gguf_files.main.read_bytes()[:200])
    assert "truncated" in identify(truncated).problems[0]


def test_header_reader_agrees_with_gguf_reader(gguf_files):
    for path in vars(gguf_files).values():
        if path == gguf_files.not_gguf:
            continue
        reference = gguf.GGUFReader(path)
        fields, names = read_gguf_header(path)
        expected = {k: f.contents() for k, f in reference.fields.items()
                    if k not in ("GGUF.tensor_count", "GGUF.kv_count")}
        assert fields == expected
        assert names == [t.name for t in reference.tensors]


def test_big_arrays_are_skipped_not_decoded(tmp_path, write_gguf):
    kv = {**load_knowledge()["main_model_required"], "tokenizer.ggml.tokens": [f"t{i}" for i in range(5000)],
          "tokenizer.ggml.scores": [0.5] * 5000}
    path = write_gguf(tmp_path / "vocab.gguf", "deepseek4", kv, ["blk.0.x", "blk.1.x"])
    fields, names = read_gguf_header(path)
    assert fields["tokenizer.ggml.tokens"] == "<array of 5000>"
    assert names == ["blk.0.x", "blk.1.x"] and identify(path).kind == "main"


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
