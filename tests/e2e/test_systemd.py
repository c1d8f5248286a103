"""Where systemd runs, supervisord must come back after a reboot: the unit is installed, enabled and started.

No systemd runs here, so `systemctl` is a stand-in that records its calls and, on `start`, runs the unit's
ExecStart line the way systemd would (in the background): that proves the rendered unit really starts a
supervisord that serves the engine. supervisord, the engine and the probes are real.
"""
import json
import os

import requests

from ds4_converge.cli import main as cli
from ds4_converge.service import systemd

FAKE_SYSTEMCTL = """#!/bin/sh
echo "$@" >> {log}
if [ "$1" = start ]; then
    cmd=$(sed -n 's/^ExecStart=//p' {units}/"$2")
    eval "nohup $cmd >/dev/null 2>&1 &"
fi
"""


def test_with_systemd_the_unit_is_installed_enabled_and_starts_supervisord(box, tmp_path, monkeypatch, capsys):
    units, bindir, log = tmp_path / "units", tmp_path / "bin", tmp_path / "systemctl.log"
    units.mkdir()
    bindir.mkdir()
    (bindir / "systemctl").write_text(FAKE_SYSTEMCTL.format(log=log, units=units))
    (bindir / "systemctl").chmod(0o755)
    monkeypatch.setattr(systemd, "has_systemd", lambda: True)
    monkeypatch.setattr(systemd, "SYSTEMD_DIR", units)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")

    assert cli.main([str(box.spec_path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    unit = units / "ds4-converge-ds4.service"
    assert unit.exists() and "--nodaemon" in unit.read_text() and "WantedBy=multi-user.target" in unit.read_text()
    calls = log.read_text().splitlines()
    assert calls == ["daemon-reload", f"enable {unit.name}", f"start {unit.name}"]
    service_role = next(r for r in document["roles"] if r["name"] == "service")
    assert not any("no systemd" in c for c in service_role["changes"])
    assert requests.get(f"{box.endpoint}/v1/models", timeout=5).status_code == 200

    assert cli.main([str(box.spec_path), "--json"]) == 0  # converged: the unit is neither rewritten nor restarted
    assert not json.loads(capsys.readouterr().out)["changed"]
    assert log.read_text().splitlines() == calls
