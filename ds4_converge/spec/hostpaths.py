"""Expand `~`, `$HOME` and `${VAR}` on the target host, for the service user.

Never with the HOME of whoever runs the command: under sudo or over ssh that is another user or machine.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from ds4_converge.errors import Ds4Error

VARIABLE = re.compile(r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)\}|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))")


class UnknownVariable(Ds4Error, ValueError):
    pass


def expand(raw: str, *, home: str, user: str, env: Mapping[str, str], base_dir: Path) -> Path:
    """`home`/`user` are the service user's; `env` the host environment; relative paths hang off base_dir."""
    values = {**env, "HOME": home, "USER": user}
    if raw == "~" or raw.startswith("~/"):
        raw = home + raw[1:]
    elif raw.startswith("~"):
        raise UnknownVariable(f"{raw}: only ~ (the service user's home) is supported, not ~otheruser")

    def substitute(match: re.Match) -> str:
        name = match.group("braced") or match.group("plain")
        if name not in values:
            raise UnknownVariable(f"{raw}: ${name} is not set on this host for user {user}")
        return values[name]

    expanded = Path(VARIABLE.sub(substitute, raw))
    return expanded if expanded.is_absolute() else (base_dir / expanded).resolve()
