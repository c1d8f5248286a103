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

from ds4_converge.engine.builder import Builder, hand_over, take_back
from ds4_converge.engine.git import EngineRepo
from ds4_converge.core.crashpoints import crash_point
from ds4_converge.core.root_trust import tree_problems
from ds4_converge.engine_knowledge import EngineVersion, engine_version, for_version
from ds4_converge.engine_knowledge import load as load_knowledge
from ds4_converge.core.layout import Layout, write_atomic
from ds4_converge.core.shell import CommandFailed, run, tail
from ds4_converge.core.release import BuildRequest, Release
from ds4_converge.core.toolkit import Toolkit
from ds4_converge.errors import Ds4Error
from ds4_converge.core import bounded_file

RECORD = "ds4-converge-release.json"
MAKE_TIMEOUT_S = 3600
FLAG = re.compile(r"(?:(?<=\s)|(?<=,)|(?<=\|)|^)(--?[A-Za-z][A-Za-z0-9-]*)")
OPTION_LINE = re.compile(r"^ {0,4}-")
TOPIC = re.compile(r"--help ([a-z][a-z0-9-]*)")
RECORD_FORMAT = 2  # 2: options with their value counts, help topics, the engine version judged by


class BuildFailed(Ds4Error):
    def __init__(self, message: str, log: Path):
        self.log = log
        self.tail = tail(log)
        super().__init__(message, self.tail)


def parse_help_flags(text: str) -> frozenset[str]:
    """Options one help page documents (see :func:`parse_help_options`)."""
    return frozenset(parse_help_options(text))


def parse_help_options(text: str) -> dict[str, int]:
    """Options one help page documents, each with how many values it takes, from its option lines.

    8d57664 prints section headings ("Model and runtime:"), then each option on a line of its own indented by
    two spaces (`  -m, --model FILE`, `  --metal | --cuda | --cpu | --backend NAME`), the description on the next
    line, six in. b030961 (and the fork) put the description on the same line after two or more spaces
    (`  --power N      GPU duty-cycle target`), long ones on the next line. Either way an option line starts with
    a dash at most four spaces in; description, heading and note lines (which may mention flags) never count.
    Words after a flag up to the next flag or `|` are its values (`--listen HOST PORT`: 2, `--cors`: 0);
    `-m, --model FILE` gives both spellings the value.
    """
    options: dict[str, int] = {}
    for line in text.splitlines():
        if not OPTION_LINE.match(line):
            continue
        column = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        spellings: list[str] = []
        for word in column.split():
            flag = FLAG.fullmatch(word.rstrip(","))
            if flag and word.startswith("-") and not is_number(word.rstrip(",")):
                if not (spellings and spellings[-1].endswith(",")):
                    spellings = []
                spellings.append(word)
                options[word.rstrip(",")] = 0
            elif word == "|":
                spellings = []
            elif spellings:
                for spelling in spellings:
                    options[spelling.rstrip(",")] += 1
    return options


def help_topics(text: str) -> list[str]:
    """The topic pages a main help page points to (b030961: `More Info` lists `--help runtime` and others)."""
    return list(dict.fromkeys(TOPIC.findall(text)))


def is_number(word: str) -> bool:
    """`-1` after an option is its value, not a flag (help pages and rendered argv both hold such words)."""
    try:
        float(word)
        return True
    except ValueError:
        return False


@dataclass(frozen=True)
class HelpText:
    """What a build documents: the main `--help` page and each topic page it lists, as printed."""

    main: str
    topics: dict[str, str]

    def options(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for page in (self.main, *self.topics.values()):
            found.update(parse_help_options(page))
        return found


def read_help(server: Path, builder: Builder | None = None) -> HelpText:
    """`ds4-server --help`, then `--help TOPIC` for every topic the main page lists (a binary just built runs as
    its builder: it is not trusted yet)."""
    main = _help_page(server, builder=builder)
    return HelpText(main, {topic: _help_page(server, topic, builder=builder) for topic in help_topics(main)})


def _help_page(server: Path, *topic: str, builder: Builder | None = None) -> str:
    # --help exits before the instance lock, but a build that takes it first must not collide with a server
    env = {**os.environ, load_knowledge()["lock"]["env"]: ".help.lock"}
    who = {"user": builder.uid, "group": builder.gid, "extra_groups": []} if builder else {}
    proc = subprocess.run([f"./{server.name}", "--help", *topic], capture_output=True, text=True, timeout=60, env=env,
                          cwd=server.parent, **who)
    if proc.returncode != 0:
        raise RuntimeError(f"{server} --help {' '.join(topic)} exited {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout)[-500:]}")
    return proc.stdout + proc.stderr


def server_options(help_text: HelpText, commit: str, ref: str) -> tuple[dict[str, int], EngineVersion]:
    """The options a release's ds4-server takes, and the engine version whose rules it is judged by.

    Every page counts (b030961 lists --mtp and --dspark only under `--help runtime`); options a page lists that
    this version's ds4-server itself refuses (b030961's distributed page documents the `ds4` CLI's tensor
    parallelism too) are left out, and those it takes without listing them added, as the knowledge of that
    version says.
    """
    options = help_text.options()
    version = engine_version(commit=commit, ref=ref, flags=frozenset(options), topics=tuple(help_text.topics))
    for flag in version.knowledge["flags"].get("not_server_options", ()):
        options.pop(flag, None)
    for flag, count in version.knowledge["flags"].get("unlisted", {}).items():
        options.setdefault(flag, count)  # taken by the parser, on no help page (b030961's --chdir)
    return options, version


def load(layout: Layout, release_id: str) -> Release | None:
    path = layout.releases / release_id
    record = path / RECORD
    if not record.exists() or not (path / "ds4-server").exists():
        return None
    try:
        data = bounded_file.read_json(record)
        commit, ref = data["commit"], data["ref"]
        if data.get("format") == RECORD_FORMAT:
            values, version = data["options"], EngineVersion(data["engine"], data["engine_why"])
            for_version(version.name)  # a version this tool no longer knows: read again below
        else:
            # written before every help page was read (b030961's --mtp is on `--help runtime` only): ask the
            # binary again rather than trust a record that may lack flags
            values, version = server_options(read_help(path / "ds4-server"), commit, ref)
        return Release(id=release_id, path=path, commit=commit, ref=ref, target=data["target"],
                       cuda_arch=data["cuda_arch"], toolkit=Toolkit(**data["toolkit"]),
                       flags=frozenset(values), values=dict(values), engine=version.name, engine_why=version.why)
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, subprocess.TimeoutExpired):
        return None  # a torn record (or a binary that no longer answers): the release is built again


def build(layout: Layout, repo: EngineRepo, request: BuildRequest, builder: Builder | None = None) -> Release:
    """Export, make, check. The tree is renamed into place only when the binary answers --help. make and that
    first run are the builder's (engine/builder.py), who may write only the partial tree."""
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
        if builder is not None:
            hand_over(partial, builder)
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "a") as handle:
                handle.write(f"# built as {builder.name} (uid {builder.uid}), who may write only this tree\n")
        run(request.make_argv(), cwd=partial, log=log, timeout=MAKE_TIMEOUT_S,
            env={"HOME": str(partial)} if builder else None, as_user=builder.ids if builder else None)
        server = partial / "ds4-server"
        if not server.exists():
            raise BuildFailed(f"make {request.target} finished but built no ds4-server", log)
        try:
            values, version = server_options(read_help(server, builder), request.commit, request.ref)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            raise BuildFailed(f"the built ds4-server does not run: {exc}", log) from None
        if builder is not None:
            take_back(partial)
        untrusted = tree_problems(partial)  # a build as root (or as this user) made its own modes
        if untrusted:
            raise BuildFailed("the built release cannot be trusted, nothing starts from it:\n  "
                              + "\n  ".join(untrusted), log)
        built = True
        crash_point("build-made")
    except CommandFailed as exc:
        raise BuildFailed(f"{' '.join(exc.argv[:4])} {exc.what}", log) from None
    finally:
        if not built:  # failed, timed out or interrupted: no half-built tree is left for anyone to trust
            shutil.rmtree(partial, ignore_errors=True)
    record = {"commit": request.commit, "ref": request.ref, "target": request.target,
              "cuda_arch": request.cuda_arch, "toolkit": asdict(request.toolkit), "flags": sorted(values),
              "format": RECORD_FORMAT, "options": dict(sorted(values.items())), "engine": version.name,
              "engine_why": version.why}
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
