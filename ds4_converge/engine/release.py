"""Built engine releases: ROOT/releases/<id>/, one clean tree per (commit, target, arch, toolchain).

An id names everything that changes the objects, so a build for another arch or toolkit is never reused.
A release counts as built only when ds4-server exists and `ds4-server --help` runs.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from ds4_converge.engine.git import EngineRepo
from ds4_converge.core.crashpoints import crash_point
from ds4_converge.engine_knowledge import load as load_knowledge
from ds4_converge.core.layout import Layout, write_atomic
from ds4_converge.core.shell import CommandFailed, run, tail
from ds4_converge.core.toolkit import Toolkit
from ds4_converge.errors import Ds4Error

RECORD = "ds4-converge-release.json"
MAKE_TIMEOUT_S = 3600
FLAG = re.compile(r"(?:(?<=\s)|(?<=,)|(?<=\|)|^)(--?[A-Za-z][A-Za-z0-9-]*)")
OPTION_LINE = re.compile(r"^ {0,4}-")


@dataclass(frozen=True)
class BuildRequest:
    commit: str
    ref: str
    target: str
    cuda_arch: str | None
    toolkit: Toolkit
    jobs: int

    @property
    def release_id(self) -> str:
        arch = f"-{self.cuda_arch}" if self.target == "cuda" and self.cuda_arch else ""
        return f"{self.commit[:12]}-{self.target}{arch}-{self.toolkit.tag}"

    def make_argv(self) -> list[str]:
        argv = ["make", f"-j{self.jobs}", self.target]
        if self.target == "cuda":
            argv.append(f"CUDA_ARCH={self.cuda_arch}")
        if self.toolkit.nvcc:
            # make's command-line variables beat both `?=` defaults and an exported stale NVCC/CUDA_HOME
            argv += [f"NVCC={self.toolkit.nvcc}", f"CUDA_HOME={self.toolkit.cuda_home}"]
        return argv


@dataclass(frozen=True)
class Release:
    id: str
    path: Path
    commit: str
    ref: str
    target: str
    cuda_arch: str | None
    toolkit: Toolkit
    flags: frozenset[str]

    @property
    def server(self) -> Path:
        return self.path / "ds4-server"

    def supports(self, flag: str) -> bool:
        return flag in self.flags


class BuildFailed(Ds4Error):
    def __init__(self, message: str, log: Path):
        self.log = log
        self.tail = tail(log)
        super().__init__(message, self.tail)


def parse_help_flags(text: str) -> frozenset[str]:
    """Options the binary documents, from its option lines.

    Upstream ds4-server prints `Usage:`, section headings ("Model and runtime:"), then each option on a line of
    its own indented by two spaces (`  -m, --model FILE`, `  --metal | --cuda | --cpu | --backend NAME`) with
    the description on the next line, indented by six. Older builds (and the fork) put the description on the
    same line after two or more spaces. Either way an option line starts with a dash at most four spaces in;
    description, heading and note lines (which may mention flags) never count.
    """
    flags = set()
    for line in text.splitlines():
        if not OPTION_LINE.match(line):
            continue
        options = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        flags.update(FLAG.findall(options))
    return frozenset(flags)


def help_flags(server: Path) -> frozenset[str]:
    # --help exits before the instance lock, but a build that takes it first must not collide with a server
    env = {**os.environ, load_knowledge()["lock"]["env"]: str(server.parent / ".help.lock")}
    proc = subprocess.run([str(server), "--help"], capture_output=True, text=True, timeout=60, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{server} --help exited {proc.returncode}: {(proc.stderr or proc.stdout)[-500:]}")
    flags = parse_help_flags(proc.stdout + proc.stderr)
    if DISTRIBUTED_TOPIC in proc.stdout:
        # b030961 lists --role/--layers/--listen/--coordinator only on its `--help distributed` page
        topic = subprocess.run([str(server), "--help", "distributed"], capture_output=True, text=True, timeout=60,
                               env=env)
        if topic.returncode == 0:
            flags |= parse_help_flags(topic.stdout)
    return flags


DISTRIBUTED_TOPIC = "--help distributed"


def load(layout: Layout, release_id: str) -> Release | None:
    path = layout.releases / release_id
    record = path / RECORD
    if not record.exists() or not (path / "ds4-server").exists():
        return None
    try:
        data = json.loads(record.read_text())
        return Release(id=release_id, path=path, commit=data["commit"], ref=data["ref"], target=data["target"],
                       cuda_arch=data["cuda_arch"], toolkit=Toolkit(**data["toolkit"]),
                       flags=frozenset(data["flags"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # a torn record: the release is built again rather than trusted


def build(layout: Layout, repo: EngineRepo, request: BuildRequest) -> Release:
    """Export, make, check. The tree is renamed into place only when the binary answers --help."""
    final = layout.releases / request.release_id
    partial = layout.releases / f".{request.release_id}.partial"
    log = layout.build_log(request.release_id)
    shutil.rmtree(partial, ignore_errors=True)  # an earlier build that died half-way
    log.unlink(missing_ok=True)
    built = False
    try:
        repo.fetch(request.commit)
        repo.export(request.commit, partial)
        crash_point("build-exported")
        run(request.make_argv(), cwd=partial, log=log, timeout=MAKE_TIMEOUT_S)
        server = partial / "ds4-server"
        if not server.exists():
            raise BuildFailed(f"make {request.target} finished but built no ds4-server", log)
        try:
            flags = help_flags(server)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            raise BuildFailed(f"the built ds4-server does not run: {exc}", log) from None
        built = True
        crash_point("build-made")
    except CommandFailed as exc:
        raise BuildFailed(f"{' '.join(exc.argv[:4])} {exc.what}", log) from None
    finally:
        if not built:  # failed, timed out or interrupted: no half-built tree is left for anyone to trust
            shutil.rmtree(partial, ignore_errors=True)
    record = {"commit": request.commit, "ref": request.ref, "target": request.target,
              "cuda_arch": request.cuda_arch, "toolkit": asdict(request.toolkit), "flags": sorted(flags)}
    write_atomic(partial / RECORD, json.dumps(record, indent=2) + "\n")
    shutil.copy2(log, partial / "build.log")
    if final.exists():  # a tree whose record was torn (load() refused it): replaced by this complete one
        shutil.rmtree(final)
    os.replace(partial, final)
    return load(layout, request.release_id)


def prune(layout: Layout, keep: int, protected: set[str]) -> list[str]:
    """Keep the `keep` newest releases plus the protected ones (current, last good); remove the rest."""
    built = sorted((p for p in layout.releases.iterdir() if (p / RECORD).exists()),
                   key=lambda p: (p / RECORD).stat().st_mtime, reverse=True)
    removable = [p for p in built[keep:] if p.name not in protected]
    for path in removable:
        shutil.rmtree(path)
    return [p.name for p in removable]
