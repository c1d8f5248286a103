"""Pure CUDA layout parsing and the join with nvcc versions."""

from __future__ import annotations

import pytest

from ds4_converge.facts import FactParseError, NvccRelease, Version, assemble_cuda, parse_cuda_layout
from ds4_converge.facts.cuda import nvcc_paths

# stale /usr/bin/nvcc (Ubuntu package, a symlink into /usr/lib) in front of a 13.2 toolkit;
# /usr/local/cuda -> cuda-12.8, and a cuda-13 alternatives link -> cuda-13.2 which has compat/.
LAYOUT = "\n".join([
    "path\t/usr/bin/nvcc\t/usr/lib/nvidia-cuda-toolkit/bin/nvcc",
    "path\t/usr/local/cuda-13.2/bin/nvcc\t/usr/local/cuda-13.2/bin/nvcc",
    "path\t/bin/nvcc\t/usr/lib/nvidia-cuda-toolkit/bin/nvcc",           # /bin -> /usr/bin merged-usr
    "toolkit\t/usr/local/cuda\t/usr/local/cuda-12.8\t1\t/usr/local/cuda/bin/nvcc\t/usr/local/cuda-12.8/bin/nvcc",
    "toolkit\t/usr/local/cuda-12.8\t/usr/local/cuda-12.8\t0\t/usr/local/cuda-12.8/bin/nvcc\t/usr/local/cuda-12.8/bin/nvcc",
    "toolkit\t/usr/local/cuda-13\t/usr/local/cuda-13.2\t1\t/usr/local/cuda-13/bin/nvcc\t/usr/local/cuda-13.2/bin/nvcc",
    "compat\t/usr/local/cuda-13\t/usr/local/cuda-13/compat",
    "toolkit\t/usr/local/cuda-13.2\t/usr/local/cuda-13.2\t0\t/usr/local/cuda-13.2/bin/nvcc\t/usr/local/cuda-13.2/bin/nvcc",
    "compat\t/usr/local/cuda-13.2\t/usr/local/cuda-13.2/compat",
    "compatlib\t/usr/local/cuda-13.2\tlibcuda.so",
    "compatlib\t/usr/local/cuda-13.2\tlibcuda.so.1",
    "compatlib\t/usr/local/cuda-13.2\tlibcuda.so.595.45.04",
    "toolkit\t/usr/local/cuda-11.8\t/usr/local/cuda-11.8\t0\t\t",                # docs only, no nvcc
    "link\t/usr/local/cuda\t1\t1\tcuda-12.8\t/usr/local/cuda-12.8",
    "",
])

RELEASES = {
    "/usr/bin/nvcc": NvccRelease(version=Version(12, 0), build="12.0.140"),
    "/usr/local/cuda-13.2/bin/nvcc": NvccRelease(version=Version(13, 2), build="13.2.51"),
    "/usr/local/cuda-12.8/bin/nvcc": NvccRelease(version=Version(12, 8), build="12.8.93"),
}


def test_layout_dedupes_toolkits_by_realpath():
    layout = parse_cuda_layout(LAYOUT)
    assert [p.path for p in layout.path_nvccs] == ["/usr/bin/nvcc", "/usr/local/cuda-13.2/bin/nvcc", "/bin/nvcc"]
    tk = {t.path: t for t in layout.toolkits}
    assert set(tk) == {"/usr/local/cuda-12.8", "/usr/local/cuda-13.2", "/usr/local/cuda-11.8"}
    assert tk["/usr/local/cuda-12.8"].aliases == ["/usr/local/cuda"]
    assert tk["/usr/local/cuda-13.2"].aliases == ["/usr/local/cuda-13"]
    assert tk["/usr/local/cuda-13.2"].compat_dir == "/usr/local/cuda-13.2/compat"
    assert tk["/usr/local/cuda-13.2"].compat_libs == ["libcuda.so", "libcuda.so.1", "libcuda.so.595.45.04"]
    assert tk["/usr/local/cuda-13.2"].compat_driver == "595.45.04"
    assert tk["/usr/local/cuda-12.8"].compat_dir is None
    assert tk["/usr/local/cuda-11.8"].nvcc is None
    assert layout.link.target == "cuda-12.8" and layout.link.resolved == "/usr/local/cuda-12.8"


def test_nvcc_paths_one_per_binary():
    assert nvcc_paths(parse_cuda_layout(LAYOUT)) == [
        "/usr/bin/nvcc", "/usr/local/cuda-13.2/bin/nvcc", "/usr/local/cuda-12.8/bin/nvcc"]


def test_assemble_stale_path_nvcc_and_old_link():
    cuda = assemble_cuda(parse_cuda_layout(LAYOUT), RELEASES)
    assert [(n.path, n.path_index, n.version) for n in cuda.nvccs] == [
        ("/usr/bin/nvcc", 0, (12, 0)),
        ("/usr/local/cuda-13.2/bin/nvcc", 1, (13, 2)),
        ("/usr/local/cuda-12.8/bin/nvcc", None, (12, 8)),
    ]
    stale = cuda.path_nvcc
    assert stale.version == Version(12, 0) and stale.toolkit is None
    assert stale.aliases == ["/bin/nvcc"]
    assert cuda.nvccs[1].toolkit == "/usr/local/cuda-13.2"
    assert "/usr/local/cuda-13/bin/nvcc" in cuda.nvccs[1].aliases
    # the Makefile's default CUDA_HOME=/usr/local/cuda resolves to the older 12.8 toolkit
    assert cuda.link_toolkit.path == "/usr/local/cuda-12.8"
    assert cuda.link_nvcc.version == Version(12, 8)
    assert "/usr/local/cuda/bin/nvcc" in cuda.link_nvcc.aliases
    assert {t.path: t.version for t in cuda.toolkits} == {
        "/usr/local/cuda-12.8": (12, 8), "/usr/local/cuda-13.2": (13, 2), "/usr/local/cuda-11.8": None}


def test_assemble_unknown_versions():
    cuda = assemble_cuda(parse_cuda_layout(LAYOUT), {})
    assert all(n.version is None for n in cuda.nvccs)


def test_layout_empty_and_missing_link():
    empty = parse_cuda_layout("")
    assert empty.path_nvccs == [] and empty.toolkits == [] and empty.link is None
    cuda = assemble_cuda(parse_cuda_layout("link\t/usr/local/cuda\t0\t0\t\t\n"), {})
    assert cuda.link.exists is False and cuda.link_toolkit is None and cuda.path_nvcc is None


def test_layout_dangling_link():
    layout = parse_cuda_layout("link\t/usr/local/cuda\t0\t1\tcuda-12.4\t/usr/local/cuda-12.4\n")
    assert layout.link.is_symlink and not layout.link.exists
    assert assemble_cuda(layout, {}).link_toolkit is None


@pytest.mark.parametrize("out", [
    "garbage\n",
    "path\t/usr/bin/nvcc\n",
    "toolkit\t/usr/local/cuda-13.2\t/usr/local/cuda-13.2\tyes\t\t\n",
    "compat\t/usr/local/cuda-9\t/usr/local/cuda-9/compat\n",      # compat for an unknown toolkit
    "link\t/usr/local/cuda\t1\t1\tx\n",
])
def test_layout_malformed(out):
    with pytest.raises(FactParseError):
        parse_cuda_layout(out)
