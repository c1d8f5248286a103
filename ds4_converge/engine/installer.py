"""Read the version an engine install.sh pins: the defaults of DS4_REPO and DS4_REF in the file that runs.

The README may name another version than the script really installs; only the script counts.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ds4_converge.errors import Ds4Error

PIN = r'^\s*(?:export\s+)?{name}=["\']?\$\{{{name}:-(?P<value>[^}}]+)\}}["\']?\s*(?:#.*)?$'


class InstallerError(Ds4Error):
    pass


@dataclass(frozen=True)
class Pin:
    repo: str | None
    ref: str


def parse_pin(text: str, origin: str) -> Pin:
    values = {}
    for name in ("DS4_REPO", "DS4_REF"):
        found = re.findall(PIN.format(name=name), text, flags=re.MULTILINE)
        values[name] = found[0].strip() if found else None
    if not values["DS4_REF"]:
        raise InstallerError(f"{origin}: no DS4_REF=\"${{DS4_REF:-…}}\" default found; cannot tell the pinned version")
    return Pin(repo=values["DS4_REPO"], ref=values["DS4_REF"])


def read_pin(installer: str, base_dir: Path, timeout: float = 20) -> Pin:
    if installer.startswith(("https://", "http://")):
        import requests  # only for an installer given by URL: not on the path of a local one

        try:
            response = requests.get(installer, timeout=timeout)
            response.raise_for_status()
        except requests.RequestException as exc:
            raise InstallerError(f"{installer}: cannot fetch installer: {exc}") from None
        return parse_pin(response.text, installer)
    path = Path(installer) if Path(installer).is_absolute() else base_dir / installer
    try:
        return parse_pin(path.read_text(), str(path))
    except OSError as exc:
        raise InstallerError(f"{path}: cannot read installer: {exc.strerror}") from None
