"""Read the version an engine install.sh pins: the defaults of DS4_REPO and DS4_REF in the file that runs.

The README may name another version than the script really installs; only the script counts. What it pins is
untrusted input (a compromised installer URL): it is bounded in size and checked like the spec's engine.repo
and engine.ref, because it reaches the same git command lines.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ds4_converge.core import bounded_file
from ds4_converge.errors import Ds4Error
from ds4_converge.spec.values import check_ref, check_repo

PIN = r'^\s*(?:export\s+)?{name}=["\']?\$\{{{name}:-(?P<value>[^}}]+)\}}["\']?\s*(?:#.*)?$'
MAX_INSTALLER_BYTES = 1024 * 1024  # install.sh is tens of KiB


class InstallerError(Ds4Error):
    pass


@dataclass(frozen=True)
class Pin:
    repo: str | None
    ref: str


def parse_pin(text: str, origin: str) -> Pin:
    values = {}
    for name, check in (("DS4_REPO", check_repo), ("DS4_REF", check_ref)):
        match = re.search(PIN.format(name=name), text, flags=re.MULTILINE)
        values[name] = match.group("value").strip() if match else None
        if values[name] is not None:
            try:
                check(values[name])
            except ValueError as exc:
                line = text.count("\n", 0, match.start()) + 1
                raise InstallerError(f"{origin}:{line}: {name}: {exc}; refusing what this installer pins") from None
    if not values["DS4_REF"]:
        raise InstallerError(f"{origin}: no DS4_REF=\"${{DS4_REF:-…}}\" default found; cannot tell the pinned version")
    return Pin(repo=values["DS4_REPO"], ref=values["DS4_REF"])


def read_pin(installer: str, base_dir: Path, timeout: float = 20) -> Pin:
    if installer.startswith(("https://", "http://")):
        return parse_pin(_fetch(installer, timeout), installer)
    path = Path(installer) if Path(installer).is_absolute() else base_dir / installer
    return parse_pin(_read(path), str(path))


def _fetch(url: str, timeout: float) -> str:
    import requests  # only for an installer given by URL: not on the path of a local one

    try:
        with requests.get(url, timeout=timeout, stream=True) as response:
            response.raise_for_status()
            body = b""
            for chunk in response.iter_content(64 * 1024):
                body += chunk
                if len(body) > MAX_INSTALLER_BYTES:
                    raise InstallerError(f"{url}: larger than {MAX_INSTALLER_BYTES // 1024} KiB: not an install.sh")
    except requests.RequestException as exc:
        raise InstallerError(f"{url}: cannot fetch installer: {exc}") from None
    return body.decode("utf-8", errors="replace")


def _read(path: Path) -> str:
    try:
        data = bounded_file.read(path, MAX_INSTALLER_BYTES, "an install.sh")
    except bounded_file.FileRefused as exc:
        raise InstallerError(f"{path}: larger than {MAX_INSTALLER_BYTES // 1024} KiB: not an install.sh"
                             if exc.too_large else f"{path}: {exc}: cannot be an install.sh") from None
    except OSError as exc:
        raise InstallerError(f"{path}: cannot read installer: {exc.strerror}") from None
    return data.decode("utf-8", errors="replace")
