"""What a switch from one deployment to another changes, in words: `ctx 65536 → 32768`, `release A → B`.

Pure: it reads the two recorded deployments (their command lines and program configs), nothing on the host.
People see it under every restart, `rollback` and revert; `--diff` still shows the whole files.
"""
from __future__ import annotations

import re
from pathlib import PurePath

from ds4_converge.core.state import Deployment

# the engine's short flags, as the spec names them (engine/server_args.py writes them)
NAMES = {"-m": "model", "--model": "model", "-c": "ctx", "--ctx": "ctx", "-n": "tokens", "--tokens": "tokens",
         "-t": "threads", "--threads": "threads"}
# switches the tool passes only where the build has them (engine/server_args.py), and what holds without them: a
# switch to a release without one is that release's flag set, not a changed setting, and is said so
BUILD_SWITCHES = {"--no-spec": "speculation is off either way",
                  "--no-update-check": "only the fork checks for updates"}
SPECULATION_FLAGS = ("--mtp", "--mtp-draft", "--dspark")
# program settings (other than the command) that change how the engine runs
PROGRAM_KEYS = ("user", "stopwaitsecs", "directory")
MODEL_IDENTITY = re.compile(r"^; model (?P<path>.+): (?P<identity>.+)$")


def config_changes(before: Deployment | None, after: Deployment) -> list[str]:
    """Each difference as one short line; [] when the two run the same way."""
    if before is None:
        return [f"first start: release {after.release}"]
    changes: list[str] = []
    if before.release != after.release:
        changes.append(f"release {before.release} → {after.release}")
    env_before, flags_before = split_command(before.command)
    env_after, flags_after = split_command(after.command)
    for flag in _union(flags_before, flags_after):
        old, new = flags_before.get(flag), flags_after.get(flag)
        if old != new:
            changes.append(f"{NAMES.get(flag, flag.lstrip('-'))} {_pair(old, new)}"
                           + _build_switch(flag, old, new, before.release, after.release, flags_before, flags_after))
    for key in _union(env_before, env_after):
        old, new = env_before.get(key), env_after.get(key)
        if old != new:
            changes.append(f"env {key} {_pair(old, new)}")
    old_program, new_program = _program_settings(before.program_conf), _program_settings(after.program_conf)
    for key in PROGRAM_KEYS:
        if key == "directory" and before.release != after.release:
            continue  # the release directory: said by the release line
        if old_program.get(key) != new_program.get(key):
            changes.append(f"{key} {_pair(old_program.get(key), new_program.get(key))}")
    old_models, new_models = _model_identities(before.program_conf), _model_identities(after.program_conf)
    for path in new_models:
        if path in old_models and old_models[path] != new_models[path]:
            changes.append(f"model file {path}: new bytes")
    if not changes and before.program_conf != after.program_conf:
        changes.append("program config (see --diff)")
    return changes


def split_command(command: list[str]) -> tuple[dict[str, str], dict[str, str | bool]]:
    """(`env` assignments, engine flags) of a recorded command `env K=V … ds4-server FLAGS`."""
    env: dict[str, str] = {}
    rest = list(command)
    if rest and PurePath(rest[0]).name == "env":
        rest.pop(0)
        while rest and "=" in rest[0] and not rest[0].startswith("-"):
            key, _, value = rest.pop(0).partition("=")
            env[key] = value
    flags: dict[str, str | bool] = {}
    tokens = rest[1:]  # rest[0] is the binary, inside the release directory
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if _is_flag(token):
            if "=" in token:
                key, _, value = token.partition("=")
                flags[key] = value
            elif i + 1 < len(tokens) and not _is_flag(tokens[i + 1]):
                flags[token] = tokens[i + 1]
                i += 1
            else:
                flags[token] = True
        i += 1
    return env, flags


def _is_flag(token: str) -> bool:
    if not token.startswith("-") or token == "-":
        return False
    try:
        float(token)
        return False
    except ValueError:
        return True


def _build_switch(flag: str, old, new, release_before: str, release_after: str, flags_before: dict,
                  flags_after: dict) -> str:
    """` (release B has no --no-spec: speculation is off either way)` where a build switch comes or goes with
    the release alone (`no-spec on → off` on a switch to upstream 8d57664 otherwise reads as a changed setting)."""
    if flag not in BUILD_SWITCHES or release_before == release_after or not (old is True or new is True):
        return ""
    if flag == "--no-spec" and any(flags_before.get(f) != flags_after.get(f) for f in SPECULATION_FLAGS):
        return ""  # speculation itself changed: its own lines say how
    has = "has" if new is True else "has no"
    return f" (release {release_after} {has} {flag}: {BUILD_SWITCHES[flag]})"


def _pair(old, new) -> str:
    switch = old is True or new is True  # a flag without a value: on or off
    return f"{_value(old, switch)} → {_value(new, switch)}"


def _value(value, switch: bool) -> str:
    if value is None:
        return "off" if switch else "(none)"
    return "on" if value is True else str(value)


def _union(first: dict, second: dict) -> list:
    return list(first) + [k for k in second if k not in first]


def _program_settings(conf: str) -> dict[str, str]:
    settings = {}
    for line in conf.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() in PROGRAM_KEYS:
            settings[key.strip()] = value.strip()
    return settings


def _model_identities(conf: str) -> dict[str, str]:
    found = {}
    for line in conf.splitlines():
        match = MODEL_IDENTITY.match(line)
        if match:
            found[match["path"]] = match["identity"]
    return found
