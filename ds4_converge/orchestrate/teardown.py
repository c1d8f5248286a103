"""`ds4-converge stop SPEC`: maintenance or teardown of one root — its engine, then its supervisord."""
from __future__ import annotations

import subprocess

from ds4_converge.core.context import Context
from ds4_converge.service.systemd import has_systemd, unit_path


def stop(ctx: Context) -> bool:
    """Stop the engine, disable the systemd unit (so a reboot does not bring it back), stop supervisord.
    False when nothing ran under this root."""
    supervisor, name = ctx.supervisor, ctx.spec.server.name
    if not supervisor.is_running():
        return False
    supervisor.stop(name, grace=ctx.spec.server.stop_wait_s)
    unit = unit_path(name)
    if has_systemd() and unit.exists():
        subprocess.run(["systemctl", "disable", "--now", unit.name], check=False)
    supervisor.shutdown()
    return True
