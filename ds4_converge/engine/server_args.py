"""The exact ds4-server command line for a spec, checked against the flags the built binary documents."""
from __future__ import annotations

from pathlib import Path

from ds4_converge.core.model_paths import ModelPaths
from ds4_converge.engine.release import Release, is_number
from ds4_converge.engine_knowledge import FORK, versions_with_flag
from ds4_converge.engine_knowledge import load as load_knowledge
from ds4_converge.spec.model import Distributed, Server
from ds4_converge.errors import Ds4Error


SPELLINGS = {"-m": ("--model",), "-c": ("--ctx",), "-n": ("--tokens",), "-t": ("--threads",)}


class UnsupportedSettings(Ds4Error):
    """The spec asks for something this engine build cannot do; found before anything is stopped."""


def server_argv(release: Release, server: Server, models: ModelPaths, kv_disk_dir: Path | None,
                distributed: Distributed | None = None) -> list[str]:
    line = _CommandLine(release)
    add = line.add
    add("-m", models.main, setting="model.main")
    add("--host", server.host, setting="server.host")
    add("--port", server.port, setting="server.port")
    add("-c", server.ctx, setting="server.ctx")
    if server.tokens:
        add("-n", server.tokens, setting="server.tokens")
    if server.threads:
        add("-t", server.threads, setting="server.threads")
    if server.warm_weights:
        add("--warm-weights", setting="server.warm_weights")
    if kv_disk_dir:
        add("--kv-disk-dir", kv_disk_dir, setting="server.kv_disk_dir")
        if server.kv_disk_space_mb:
            add("--kv-disk-space-mb", server.kv_disk_space_mb, setting="server.kv_disk_space_mb")
    _speculation(line, server, models)
    if server.power is not None and not _runs_at_default(release, "--power", server.power):
        add("--power", server.power, setting="server.power")
    if release.supports("--no-update-check"):
        line.args.append("--no-update-check")  # the fork otherwise polls GitHub daily
    if distributed is not None:
        if not release.supports("--role"):
            line.missing.append("distributed needs --role, --layers, --listen and --coordinator (ds4 b030961 or "
                                "later: `ds4-server --help distributed`)")
        else:
            line.args += distributed_args(distributed)
    for arg in server.extra_args:
        flag = arg.split("=", 1)[0]
        if flag.startswith("-") and not is_number(flag) and not release.supports(flag):
            line.missing.append(f"server.extra_args {arg!r} is not an option of this ds4-server")
    line.args.extend(server.extra_args)
    if line.missing:
        raise UnsupportedSettings(f"release {release.id} ({release.ref}) does not support: "
                                  + "; ".join(line.missing))
    return [str(release.server), *line.args]


class _CommandLine:
    """The arguments so far, and every setting this build has no flag for (all said at once, before anything is
    stopped)."""

    def __init__(self, release: Release) -> None:
        self.release = release
        self.args: list[str] = []
        self.missing: list[str] = []

    def add(self, flag: str, *values: object, setting: str) -> None:
        # short and long spellings are the same option; use whichever this binary's --help lists
        spelling = next((f for f in (flag, *SPELLINGS.get(flag, ())) if self.release.supports(f)), None)
        if spelling is None:
            self.missing.append(f"{setting} needs {flag}{_where_it_exists(flag)}")
            return
        self.args.extend([spelling, *map(str, values)])


def _speculation(line: _CommandLine, server: Server, models: ModelPaths) -> None:
    release, spec_mode, add = line.release, server.speculative, line.add
    if spec_mode.mode == "mtp":
        add("--mtp", models.mtp, setting="server.speculative.mode=mtp")
        add("--mtp-draft", spec_mode.draft, setting="server.speculative.draft")
        if spec_mode.margin:
            add("--mtp-margin", spec_mode.margin, setting="server.speculative.margin")
    elif spec_mode.mode == "dspark":
        # one feature, two spellings: the fork's `--dspark FILE`, upstream b030961's `--mtp FILE --dspark`
        # (a switch); which one is the build's own --help's word, not the version's name
        if release.takes_value("--dspark") is False:
            add("--mtp", models.dspark, setting="server.speculative.mode=dspark")
            add("--dspark", setting="server.speculative.mode=dspark")
        else:
            add("--dspark", models.dspark, setting="server.speculative.mode=dspark")
    elif release.supports("--no-spec"):
        # the fork attaches sibling drafters by default; "off" must be explicit there
        line.args.append("--no-spec")


def distributed_args(distributed: Distributed) -> list[str]:
    """--role, --layers, --listen HOST PORT and, for a worker, --coordinator HOST PORT (ds4_distributed.c)."""
    args = ["--role", distributed.role, "--layers", distributed.layers,
            "--listen", distributed.listen.host, str(distributed.listen.port)]
    if distributed.coordinator is not None:
        args += ["--coordinator", distributed.coordinator.host, str(distributed.coordinator.port)]
    return args


def not_rendered(release: Release, server: Server) -> list[str]:
    """Settings left off the command line because this build always runs that way (said as a note, not refused)."""
    if server.power is not None and _runs_at_default(release, "--power", server.power):
        later = _engines_with("--power")
        return [f"server.power {server.power} is not passed: this ds4-server (release {release.id}) has no --power "
                "and always runs at full duty cycle"
                + (f"; of the known engines only {' and '.join(later)} have --power" if later else "")]
    return []


def _runs_at_default(release: Release, flag: str, value: object) -> bool:
    """A build without `flag` runs at the engine's default for it; asking for exactly that needs no flag."""
    default = load_knowledge()["flags"]["defaults_without_flag"].get(flag)
    return not release.supports(flag) and default is not None and value == default


def _engines_with(flag: str) -> list[str]:
    """The known engines that have `flag`, named for people."""
    return [("the Entrpi fork" if n == FORK else f"upstream {n}") for n in versions_with_flag(flag)]


def _where_it_exists(flag: str) -> str:
    """' (a flag of upstream b030961 and the Entrpi fork)': which known engines have it, for the message."""
    names = _engines_with(flag)
    if not names:
        return ""
    only = " only" if names == ["the Entrpi fork"] else ""
    return f" (a flag of {' and '.join(names)}{only})"
