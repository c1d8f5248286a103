"""Rendered supervisord files read back with supervisor's own parser give exactly our argv."""
import shlex

import pytest
from supervisor.options import ServerOptions

from ds4_converge.core.layout import Layout
from ds4_converge.service.supervisor import GUARD, WATCHDOG, guard_argv, watchdog_argv
from ds4_converge.service.render import UnsafeValue, command_line, ini_value, program_conf, supervisord_conf

NASTY = ["/usr/bin/env", "A=x y;z", "B=%(here)s", "C=100%", "/opt/ds4/ds4-server", "-m", "/a b/#m ;x.gguf",
         "q'\"", "", " #x", "$(rm -rf /)", "a\tb"]


def read_back(tmp_path, argv, user=None, watchdog=True):
    layout = Layout(tmp_path / "root")
    layout.ensure()
    layout.supervisord_conf.write_text(supervisord_conf(layout))
    layout.program_conf("ds4").write_text(program_conf(name="ds4", release="r1", argv=argv, directory=str(tmp_path),
                                                       log=str(tmp_path / "ds4.log"), user=user, stop_wait_s=600,
                                                       watchdog=watchdog))
    options = ServerOptions()
    options.realize(args=["-c", str(layout.supervisord_conf)])
    groups = {g.name: g for g in options.process_group_configs}
    assert set(groups) == {"ds4", GUARD, WATCHDOG}
    return options, groups["ds4"].process_configs[0]


def test_nasty_values_survive_supervisor_parsing(tmp_path):
    _, program = read_back(tmp_path, NASTY)
    assert shlex.split(program.command) == NASTY


def _resident_program(tmp_path, name):
    """Supervisord's program `name` (started with supervisord, started again whenever it exits), and the engine's."""
    options, engine = read_back(tmp_path, ["/bin/true"])
    [group] = [g for g in options.process_group_configs if g.name == name]
    program = group.process_configs[0]
    assert program.autostart and program.autorestart
    return program, engine


def test_the_switch_guard_is_a_resident_program_of_supervisord(tmp_path):
    program, _ = _resident_program(tmp_path, GUARD)
    assert shlex.split(program.command) == guard_argv(tmp_path / "root")


def test_the_watchdog_is_a_resident_program_of_supervisord_and_the_one_that_restarts(tmp_path):
    program, engine = _resident_program(tmp_path, WATCHDOG)
    assert shlex.split(program.command) == watchdog_argv(tmp_path / "root")
    assert engine.autorestart is False  # the watchdog restarts (and records) every exit nobody ordered
    # without the watchdog supervisord restarts every exit, exit 0 included (a SIGTERM from outside)
    _, alone = read_back(tmp_path, ["/bin/true"], watchdog=False)
    from supervisor.datatypes import RestartUnconditionally
    assert alone.autorestart is RestartUnconditionally and alone.exitcodes == [0]


def test_program_settings(tmp_path):
    options, program = read_back(tmp_path, ["/bin/true"])
    assert program.stopsignal == 15 and program.stopwaitsecs == 600
    assert program.stopasgroup and program.killasgroup
    assert program.stdout_logfile_maxbytes == 50 * 1024 * 1024
    assert options.server_configs[0]["family"] == 1  # AF_UNIX only: no inet listener
    assert not any(c["section"] == "inet_http_server" for c in options.server_configs)


@pytest.mark.parametrize("value", ["a\nb", "x ;comment", "%(here)s", " lead"])
def test_unsafe_ini_values_are_refused(value):
    with pytest.raises(UnsafeValue):
        ini_value(value)


def test_newline_in_argv_is_refused():
    with pytest.raises(UnsafeValue):
        command_line(["/bin/echo", "a\nb"])


def test_the_interpreter_is_named_the_same_however_the_tool_was_started(tmp_path, monkeypatch):
    """`python -m ds4_converge.cli` and the ds4-converge script (python3) must render the same supervisord.conf."""
    import os
    import sys

    layout = Layout(tmp_path / "root")
    names = [n for n in ("python", "python3") if os.path.exists(os.path.join(sys.prefix, "bin", n))]
    if len(names) < 2:
        pytest.skip(f"this environment has only {names} (a venv has both)")
    rendered = set()
    for name in names:
        monkeypatch.setattr(sys, "executable", os.path.join(sys.prefix, "bin", name))
        rendered.add(supervisord_conf(layout))
    assert len(rendered) == 1
