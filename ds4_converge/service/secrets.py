"""Secrets in server.env (HF_TOKEN, an API key …): only in files no other user can read, never in our records.

A variable whose name says it is a secret (TOKEN, SECRET, PASSWORD, KEY, CREDENTIAL, AUTH) reaches the engine
through supervisord's `environment=` (so it is not on the engine's command line, which every user can read in
/proc), in a program file written 0600. Everything else the tool keeps — the Deployment in state.json, the render
cache — holds a placeholder named by a digest of the value instead: the *sealed* program text. The values
themselves are kept in ROOT/run/secrets.json (0600, in the 0700 run/), so a revert or the switch guard can write
last good's program file back exactly; the file holds the values of the deployments in use only.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from ds4_converge.core.layout import Layout, write_atomic
from ds4_converge.service.render import UnsafeValue
from ds4_converge.spec.values import SECRET_NAME, secret_value_problem
from ds4_converge.core import bounded_file

_PLACEHOLDER = re.compile(r"@ds4c-secret-[0-9a-f]{32}@")
_known: dict[str, str] = {}  # placeholder -> value, learned from the spec by this run


def is_secret(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def placeholder(value: str) -> str:
    return f"@ds4c-secret-{hashlib.sha256(value.encode()).hexdigest()[:32]}@"


def _rendered(value: str) -> str:
    """The value quoted as it stands in `environment=K=…` (supervisor's parser: a non-POSIX shlex, which knows no
    escapes and strips quote characters at the ends, then configparser's interpolation and inline comments)."""
    problem = secret_value_problem(value)  # validation refuses these already; a value from elsewhere, here
    if problem:
        raise UnsafeValue(problem)
    quote = "'" if '"' in value else '"'
    return f"{quote}{value.replace('%', '%%')}{quote}"


def environment_line(secrets: dict[str, str]) -> str:
    """The sealed `environment=` value for these secrets; what each placeholder stands for is remembered."""
    parts = []
    for name, value in sorted(secrets.items()):
        _rendered(value)
        mark = placeholder(value)
        _known[mark] = value
        parts.append(f'{name}="{mark}"')  # quoted as the value needs when unsealed
    return ",".join(parts)


def _store(layout: Layout) -> Path:
    return layout.run / "secrets.json"


def _stored(layout: Layout) -> dict[str, str]:
    try:
        data = bounded_file.read_json(_store(layout))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(data, dict) else {}


def seal(text: str | None, layout: Layout) -> str | None:
    """A program file as read from disk, with each secret value we know put back as its placeholder: what is
    compared with a desired deployment, shown in a diff, or recorded when state.json is rebuilt."""
    if text is None:
        return None
    for mark, value in {**_stored(layout), **_known}.items():
        text = text.replace(f"={_rendered(value)}", f'="{mark}"')
    return text


def write_program(layout: Layout, path: Path, sealed: str, keep: set[str] = frozenset()) -> None:
    """Write the program file with the real values, 0600; remember those values in the 0600 store (with those of
    the `keep` texts: last good and where rollback goes) so that a later revert can write it back."""
    values = {**_stored(layout), **_known}
    used = set(_PLACEHOLDER.findall(sealed)) | {m for text in keep for m in _PLACEHOLDER.findall(text)}
    missing = sorted(m for m in set(_PLACEHOLDER.findall(sealed)) if m not in values)
    if missing:
        raise UnsafeValue(f"{path}: the secret behind {missing[0]} is not known here (ROOT/run/secrets.json lost); "
                          "converge from the spec to write it again")
    store = {m: values[m] for m in sorted(used) if m in values}
    if store != _stored(layout):
        layout.run.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(_store(layout), json.dumps(store, indent=1, sort_keys=True) + "\n", mode=0o600)
    write_atomic(path, unseal(sealed, layout), mode=0o600)


def unseal(sealed: str, layout: Layout) -> str:
    """The program text as supervisord reads it: each placeholder (in its quotes) replaced by the quoted value."""
    values = {**_stored(layout), **_known}
    return re.sub(f'"({_PLACEHOLDER.pattern})"', lambda m: _rendered(values[m.group(1)]), sealed)
