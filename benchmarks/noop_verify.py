"""No-op verification cost: a converged run must not re-read the model, whatever its size.

Times verified_sha256() with a warm digest cache on a 1 MiB file and on a multi-GiB sparse file (the cached
path only stats the file, so sparseness does not flatter it), against cold hashing. Also times the GGUF
identity check on the big file carrying a realistic 129,280-token vocabulary, with our header reader and
with gguf.GGUFReader. Writes the results under "## No-op verification cost" in benchmarks/REPORT.md.

    .venv/bin/python benchmarks/noop_verify.py [--big-gib 4] [--dir /tmp] [--no-report]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
from report_file import measured_on, write_section  # noqa: E402 - benchmarks/ is on sys.path: run as a script
HEADING = "## No-op verification cost"
VOCAB = 129_280
Q2_GIB = 81


import sys  # noqa: E402

import gguf  # noqa: E402

sys.path.insert(0, str(REPO / "engine" / "models"))
import make_tiny_gguf as tiny_gguf  # noqa: E402

from ds4_converge.models.digests import DigestCache, verified_sha256  # noqa: E402
from ds4_converge.engine_knowledge import load as load_knowledge  # noqa: E402
from ds4_converge.models.gguf import identify  # noqa: E402


def timed(fn, repeat: int) -> float:
    """Median seconds of `repeat` calls."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def fmt(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} µs"


def write_big_gguf(path: Path, size: int) -> None:
    """A main-model header with a full-size vocabulary (the project's one GGUF writer), then extended sparsely to
    `size` bytes."""
    kv = tiny_gguf.main_model_kv()
    tokens = load_knowledge()["gguf"]["tokenizer"]["tokens"]
    specials = kv[tokens].value
    kv[tokens] = tiny_gguf.Value(tiny_gguf.T.ARRAY, specials + [f"token{i}" for i in range(VOCAB - len(specials))],
                                 tiny_gguf.T.STRING)
    kv["tokenizer.ggml.scores"] = tiny_gguf.Value(tiny_gguf.T.ARRAY, [0.0] * VOCAB, tiny_gguf.T.FLOAT32)
    tiny_gguf.write(path, "deepseek4", kv)
    os.truncate(path, size)


def warm_lookup(path: Path, cache_file: Path) -> None:
    # a no-op run is a fresh process: new cache object, JSON load, one stat
    verified_sha256(path, DigestCache(cache_file))


def run(workdir: Path, big_bytes: int, repeat: int) -> list[tuple[str, str, str]]:
    small, big = workdir / "small.bin", workdir / "big.gguf"
    small.write_bytes(os.urandom(1024 * 1024))
    write_big_gguf(big, big_bytes)
    cache_file = workdir / "digests.json"
    big_label = f"{big_bytes / 1024**3:.0f} GiB (sparse)"

    rows = [("cold sha256, no cache", "1 MiB", fmt(timed(lambda: verified_sha256(small, None), repeat)))]
    start = time.perf_counter()
    verified_sha256(big, DigestCache(cache_file))
    big_cold = time.perf_counter() - start
    rows.append(("cold sha256, fills the cache (once)", big_label, fmt(big_cold)))
    rows.append(("cold sha256, extrapolated at that rate", f"{Q2_GIB} GiB (q2 GGUF)",
                 fmt(big_cold * Q2_GIB * 1024**3 / big_bytes)))
    verified_sha256(small, DigestCache(cache_file))
    rows.append(("**warm cache** (new DigestCache + stat)", "1 MiB", fmt(timed(lambda: warm_lookup(small, cache_file),
                                                                                repeat))))
    rows.append(("**warm cache** (new DigestCache + stat)", big_label, fmt(timed(lambda: warm_lookup(big, cache_file),
                                                                                  repeat))))
    rows.append((f"GGUF identity, header reader ({VOCAB} tokens)", big_label,
                 fmt(timed(lambda: identify(big), max(3, repeat // 20)))))
    rows.append((f"GGUF identity via gguf.GGUFReader ({VOCAB} tokens)", big_label,
                 fmt(timed(lambda: gguf.GGUFReader(big), 1))))
    return rows


def render(rows, big_bytes: int, repeat: int) -> str:
    lines = [HEADING, "",
             f"{measured_on('noop_verify.py')}; medians of {repeat} runs "
             f"(cold big hash and GGUFReader: one run).", "",
             "| step | file | time |", "|---|---|---|"]
    lines += [f"| {step} | {size} | {t} |" for step, size, t in rows]
    lines += ["",
              "The warm path stats the file and reads the small JSON cache; it does not open the model, so its "
              "cost is the same for 1 MiB and for an 80 GB GGUF. Cold hashing grows linearly with size; "
              "it happens once per downloaded file (while streaming) or once after the file changed. The "
              "identity check reads only the GGUF header; gguf.GGUFReader decodes every tokenizer string, "
              "which is why ds4_converge.models.gguf has its own header reader.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big-gib", type=float, default=4)
    parser.add_argument("--dir", type=Path, default=None, help="where to create the files (sparse-capable fs)")
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--report", type=Path, default=REPO / "benchmarks" / "REPORT.md")
    parser.add_argument("--no-report", action="store_true")
    args = parser.parse_args()
    big_bytes = int(args.big_gib * 1024**3)
    with tempfile.TemporaryDirectory(dir=args.dir) as workdir:
        rows = run(Path(workdir), big_bytes, args.repeat)
    section = render(rows, big_bytes, args.repeat)
    print(section)
    if not args.no_report:
        write_section(HEADING, section, args.report)


if __name__ == "__main__":
    main()
