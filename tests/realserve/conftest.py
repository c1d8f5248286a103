"""The real engine serving a phantom model: the files, the engine repository the tool builds from, the binaries.

Cost is the design constraint here: each prompt or output token costs seconds on a 2-core CPU. So one phantom
(and one disk KV cache directory) serves the whole session, every prompt is "Hi" (5 tokens with the chat
template) with max_tokens 1, and the disk KV cache lets a repeated prompt skip its prefill, also in a new process.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

import real_engine
from serving import phantom_gguf

GIT_ENV = {"GIT_AUTHOR_NAME": "ds4", "GIT_AUTHOR_EMAIL": "ds4@invalid", "GIT_COMMITTER_NAME": "ds4",
           "GIT_COMMITTER_EMAIL": "ds4@invalid", "GIT_AUTHOR_DATE": "2026-05-21T00:00:00Z",
           "GIT_COMMITTER_DATE": "2026-05-21T00:00:00Z"}


@dataclass(frozen=True)
class Phantom:
    main: Path
    mtp: Path
    dspark: Path
    kv: Path  # the disk KV cache every engine of the session uses


@pytest.fixture(scope="session")
def phantom(tmp_path_factory) -> Phantom:
    folder = tmp_path_factory.mktemp("phantom")
    files = {kind: phantom_gguf.WRITERS[kind](folder / name) for kind, name in phantom_gguf.FILES.items()}
    kv = folder / "kv"
    kv.mkdir()
    return Phantom(files["main"], files["mtp"], files["dspark"], kv)


@pytest.fixture(scope="session", params=real_engine.VERSIONS)
def each_engine(request) -> real_engine.RealEngine:
    return real_engine.built(request.param)


def _git(tree: Path, *argv: str) -> str:
    return subprocess.run(["git", *argv], cwd=tree, env={**os.environ, **GIT_ENV}, check=True,
                          capture_output=True, text=True).stdout.strip()


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{path.name}: {old!r} is not there exactly once"
    path.write_text(text.replace(old, new), encoding="utf-8")


def _commit_on(tree: Path, base: str, tag: str, message: str, edit) -> None:
    _git(tree, "checkout", "-q", base)
    edit(tree)
    _git(tree, "commit", "-q", "-am", message)
    _git(tree, "tag", tag)


@pytest.fixture(scope="session")
def engine_repo(tmp_path_factory) -> Path:
    """One git repository with both upstream trees as commits (tags 8d57664 and b030961, so that an upgrade is a
    real ref change) and three releases on top of 8d57664 that go wrong, each by a one-line change of the real tree:
      broken-build    the Makefile stops at once ($(error …))
      dies-at-start   the engine requires a metadata key no model has: it exits 1 at load, as a bad release does
      wrong-answer    greedy sampling picks the token after the best one: the engine answers, wrongly
      hangs-at-start  after its options (so --help answers) the server ignores SIGTERM and waits forever,
                      never binding its port
    """
    archives = {v: real_engine.require(v) for v in real_engine.VERSIONS}
    tree = tmp_path_factory.mktemp("upstream") / "ds4"
    tree.mkdir()
    _git(tree, "init", "-q", "-b", "main")
    for version in real_engine.VERSIONS:
        for entry in tree.iterdir():
            if entry.name != ".git":
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        top = real_engine.unpack(archives[version], tree.parent / f".{version}")
        for entry in top.iterdir():
            entry.rename(tree / entry.name)
        _git(tree, "add", "-A")
        _git(tree, "commit", "-q", "-m", f"antirez/ds4 {version}")
        _git(tree, "tag", version)
    base = "8d57664"
    _commit_on(tree, base, "broken-build", "Makefile: broken on purpose",
               lambda t: _edit(t / "Makefile", "CC ?= cc\n", "$(error this Makefile is broken on purpose)\nCC ?= cc\n"))
    _commit_on(tree, base, "dies-at-start", "Require a metadata key no model has",
               lambda t: _edit(t / "ds4.c", 'required_u32(m, "deepseek4.block_count")',
                               'required_u32(m, "deepseek4.block_count_v2")'))
    _commit_on(tree, base, "wrong-answer", "Greedy sampling picks the token after the best",
               lambda t: _edit(t / "ds4.c", "            best = (int)i;\n        }\n    }\n    return best;\n}",
                               "            best = (int)i;\n        }\n    }\n    return best + 1;\n}"))
    _commit_on(tree, base, "hangs-at-start", "Hang before binding the port, deaf to SIGTERM",
               lambda t: _edit(t / "ds4_server.c", "    server_config cfg = parse_options(argc, argv);\n",
                               "    server_config cfg = parse_options(argc, argv);\n"
                               "    signal(SIGTERM, SIG_IGN);\n    for (;;) pause();\n"))
    _git(tree, "checkout", "-q", "main")
    return tree
