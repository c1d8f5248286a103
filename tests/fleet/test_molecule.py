"""The fleet: `molecule test` for each scenario, so the project's one test command covers the Ansible role.

Real Ansible over real ssh: molecule/default/create.yml starts an sshd of its own on a loopback port and the
three "Sparks" are ssh root@127.0.0.1 connections to it (see molecule/default/molecule.yml). Each run uses
free ports (DS4_FLEET_SSH_PORT, DS4_FLEET_PORT_1..3) so it never meets another test's engine.

Skipped only when Ansible or molecule (pyproject's `fleet` extra) is not installed: `bash .ci/fleet-deps.sh
.venv` installs them and sshd.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SCENARIO_TIMEOUT_S = 360
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _missing() -> list[str]:
    missing = [module for module in ("ansible", "molecule", "testinfra") if importlib.util.find_spec(module) is None]
    missing += [tool for tool in ("molecule", "ansible-playbook")
                if not (BIN / tool).exists() and shutil.which(tool) is None]
    return missing


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(_missing()), reason=f"fleet extra not installed ({', '.join(_missing())} missing): "
                                                 "run `bash .ci/fleet-deps.sh .venv`"),
]


def _free_ports(count: int) -> list[int]:
    """Distinct free loopback ports: every socket is held until all are chosen."""
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


def _env() -> dict[str, str]:
    ssh_port, *engine_ports = _free_ports(4)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOLECULE_")}  # no inherited ephemeral dir
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", NO_COLOR="1", PY_COLORS="0", ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0", DS4_FLEET_SSH_PORT=str(ssh_port))
    env.update({f"DS4_FLEET_PORT_{i}": str(port) for i, port in enumerate(engine_ports, start=1)})
    return env


def _molecule(env: dict[str, str], *args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "molecule") if (BIN / "molecule").exists() else "molecule", *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(SCENARIO_TIMEOUT_S + 60)
@pytest.mark.parametrize("scenario", ["default", "canary"])
def test_molecule_scenario(scenario):
    env = _env()
    try:
        proc = _molecule(env, "test", "--scenario-name", scenario, timeout=SCENARIO_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        _molecule(env, "destroy", "--scenario-name", scenario, timeout=120)  # stop engines, sshd; remove the fleet
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        pytest.fail(f"molecule test -s {scenario} ran past {SCENARIO_TIMEOUT_S}s:\n{ANSI.sub('', out)[-6000:]}")
    output = ANSI.sub("", proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"molecule test -s {scenario} exited {proc.returncode}:\n{output[-12000:]}"
    assert re.search(rf"{scenario}\s+: actions=\d+\s+successful=\d+\s+.*failed=0", output), output[-3000:]
