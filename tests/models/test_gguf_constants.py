"""The GGUF header reader carries the format's constants itself (importing gguf costs a no-op run most of its
time): they must be the gguf package's."""
import gguf

from ds4_converge.models.gguf import GGUF_MAGIC, _T


def test_value_types_and_magic_are_the_gguf_packages():
    assert {t.name: int(t) for t in _T} == {t.name: int(t) for t in gguf.GGUFValueType}
    assert GGUF_MAGIC == gguf.GGUF_MAGIC


def test_tensor_block_sizes_are_the_gguf_packages():
    from ds4_converge.models.gguf import GGML_BLOCK_SIZES

    assert GGML_BLOCK_SIZES == {int(t): tuple(size) for t, size in gguf.GGML_QUANT_SIZES.items()}
