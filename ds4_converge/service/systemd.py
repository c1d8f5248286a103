"""Where systemd runs, supervisord runs under it (so it comes back after a reboot): where its unit lives."""
from __future__ import annotations

from pathlib import Path

from ds4_converge.core.shell import run

SYSTEMD_DIR = Path("/etc/systemd/system")
SYSTEMCTL_TIMEOUT_S = 120  # systemctl waits on jobs (a unit's stop can take its whole TimeoutStopSec)


def has_systemd() -> bool:
    return Path("/run/systemd/system").is_dir()


def unit_path(server_name: str) -> Path:
    return SYSTEMD_DIR / f"ds4-converge-{server_name}.service"


def systemctl(*args: str) -> None:
    """systemctl, bounded by SYSTEMCTL_TIMEOUT_S; a failure or timeout raises core.shell.CommandFailed."""
    run(["systemctl", *args], timeout=SYSTEMCTL_TIMEOUT_S)
