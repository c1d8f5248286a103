"""`ds4-converge stop SPEC`: maintenance or teardown of one root — its engine, then its supervisord."""
from __future__ import annotations

from ds4_converge.core.context import Context
from ds4_converge.core.shell import CommandFailed
from ds4_converge.service import watchdog
from ds4_converge.service.switch import stop_grace
from ds4_converge.service.systemd import has_systemd, systemctl, unit_path


def stop(ctx: Context) -> bool:
    """Stop the engine, disable the systemd unit (so a reboot does not bring it back), stop supervisord.
    False when nothing ran under this root. The engine gets the grace a switch gives it (a distributed worker
    its short distributed.stop_grace_s, since it ignores the first SIGTERM)."""
    supervisor, name = ctx.supervisor, ctx.spec.server.name
    watchdog.write_settings(ctx.layout, None)  # an ordered stop: nothing for the watchdog to bring back
    if not supervisor.is_running():
        return False
    supervisor.stop(name, grace=stop_grace(ctx.spec))
    unit = unit_path(name)
    if has_systemd() and unit.exists():
        try:
            systemctl("disable", "--now", unit.name)
        except CommandFailed as exc:  # supervisord is stopped below all the same; the unit is left to the user
            ctx.say(f"warning: systemctl disable --now {unit.name} {exc.what}; disable it by hand")
    supervisor.shutdown()
    return True
