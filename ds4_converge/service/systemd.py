"""Where systemd runs, supervisord runs under it (so it comes back after a reboot): where its unit lives."""
from __future__ import annotations

from pathlib import Path

SYSTEMD_DIR = Path("/etc/systemd/system")


def has_systemd() -> bool:
    return Path("/run/systemd/system").is_dir()


def unit_path(server_name: str) -> Path:
    return SYSTEMD_DIR / f"ds4-converge-{server_name}.service"
