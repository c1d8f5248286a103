"""The fleet: `molecule test` for each scenario, so the project's one test command covers the Ansible role.

Real Ansible over real ssh, without root and without a system sshd: molecule/shared/create.yml starts the
scenario's own ssh server (molecule/shared/loopback_sshd.py: this user, 127.0.0.1, a free port, generated keys)
and the three "Sparks" are ssh connections to it. Every port is free-picked, so a run never meets another.

Each run gets its own temporary directory for molecule's ephemeral state, Ansible's home and TMPDIR, an empty
HOME in which none of molecule, Ansible, pip or ssh may leave anything (the "hosts" get that HOME too), and a
PATH without any sshd (nothing may depend on one).

Skipped only when pyproject's `fleet` extra is not installed. The OpenSSH client (`ssh`, `sftp`) must be there:
Ansible's ssh connection runs it, and without it the scenarios fail at their first ping.
"""
from __future__ import annotations

import importlib.util
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SCENARIO_TIMEOUT_S = 1200
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# where molecule, Ansible, ansible-compat, pip and ssh keep things in a home directory (other tools on PATH may
# write there when merely asked their version: pip asks rustc, and rustup's rustc writes ~/.rustup)
HOME_OF_THE_FLEET_TOOLS = {".ansible", ".cache", ".config", ".local", ".ssh"}


def _missing() -> list[str]:
    missing = [module for module in ("ansible", "molecule", "testinfra", "asyncssh")
               if importlib.util.find_spec(module) is None]
    missing += [tool for tool in ("molecule", "ansible-playbook")
                if not (BIN / tool).exists() and shutil.which(tool) is None]
    return missing


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(_missing()), reason=f"fleet extra not installed ({', '.join(_missing())} missing): "
                                                 "pip install -e '.[test,fleet]'"),
]


def _path_without_sshd() -> str:
    """The caller's PATH, the venv first, and no directory that holds an sshd."""
    dirs = [str(BIN)] + [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and d != str(BIN)]
    return os.pathsep.join(d for d in dirs if not (Path(d) / "sshd").exists())


def _env(scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MOLECULE_", "ANSIBLE_"))}
    (scratch / "home").mkdir()
    (scratch / "tmp").mkdir()
    env.update(
        PATH=_path_without_sshd(), HOME=str(scratch / "home"), TMPDIR=str(scratch / "tmp"),
        # short: ssh's control sockets live below it, and a unix socket path holds ~100 bytes
        MOLECULE_EPHEMERAL_DIRECTORY=str(scratch / "m"), ANSIBLE_HOME=str(scratch / "ansible"),
        NO_COLOR="1", PY_COLORS="0", ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    return env


def link_collection() -> None:
    """The collection ds4.converge is this checkout: build/collections holds a link to it (`make collection`)."""
    link = REPO / "build" / "collections" / "ansible_collections" / "ds4" / "converge"
    if not link.is_symlink() or link.resolve() != REPO:
        link.parent.mkdir(parents=True, exist_ok=True)
        tmp = link.with_name(f".converge.{os.getpid()}")
        tmp.symlink_to("../../../..")
        os.replace(tmp, link)


def _molecule(env: dict[str, str], *args: str, timeout: float) -> subprocess.CompletedProcess:
    # the shared base config named explicitly: molecule finds it on its own only at the root of a git checkout
    molecule = str(BIN / "molecule") if (BIN / "molecule").exists() else "molecule"
    return subprocess.run([molecule, "--base-config", str(REPO / ".config" / "molecule" / "config.yml"), *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def scratch():
    # not pytest's tmp_path: its paths are too long for ssh's control sockets
    with tempfile.TemporaryDirectory(prefix="ds4-fleet.") as path:
        yield Path(path)


def test_openssh_client_is_installed():
    """Ansible's ssh connection (and testinfra) run the OpenSSH client; a server is not needed."""
    missing = [tool for tool in ("ssh", "sftp") if shutil.which(tool) is None]
    assert not missing, f"{missing} not found: install the OpenSSH client (Debian: apt-get install openssh-client)"


def test_haproxy_is_installed():
    """The haproxy scenario runs the distribution's HAProxy (as the test user; its system service is not used)."""
    assert shutil.which("haproxy") or Path("/usr/sbin/haproxy").exists(), (
        "haproxy not found: install it (Debian: apt-get install haproxy; .ci/fleet-deps.sh does)")


@pytest.mark.timeout(SCENARIO_TIMEOUT_S + 120)
@pytest.mark.parametrize("scenario", ["default", "canary", "haproxy"])
def test_molecule_scenario(scenario, scratch):
    link_collection()
    env = _env(scratch)
    # Ansible also finds the account's home without $HOME (`echo ~USER` for its temporary directories): where
    # that home has no .ansible or .ssh yet, it must have none afterwards either
    account_home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    absent = [name for name in HOME_OF_THE_FLEET_TOOLS if not (account_home / name).exists()]
    try:
        proc = _molecule(env, "test", "--scenario-name", scenario, timeout=SCENARIO_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        _molecule(env, "destroy", "--scenario-name", scenario, timeout=120)  # engines, ssh server, the fleet dir
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        pytest.fail(f"molecule test -s {scenario} ran past {SCENARIO_TIMEOUT_S}s:\n{ANSI.sub('', out)[-6000:]}")
    output = ANSI.sub("", proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"molecule test -s {scenario} exited {proc.returncode}:\n{output[-12000:]}"
    assert re.search(rf"{scenario}\s+: actions=\d+\s+successful=\d+\s+.*failed=0", output), output[-3000:]
    home = scratch / "home"
    written = sorted(p.name for p in home.iterdir() if p.name in HOME_OF_THE_FLEET_TOOLS - {".cache"})
    # ds4-converge keeps its no-op receipts in the host user's ~/.cache/ds4-converge (README: "A converged box
    # answers in about 0.1 s"): the hosts' own state, not a fleet tool's leftover
    written += sorted(f".cache/{p.name}" for p in (home / ".cache").glob("*") if p.name != "ds4-converge")
    assert written == [], f"written to HOME: {written}"
    created = sorted(name for name in absent if (account_home / name).exists())
    assert created == [], f"created in {account_home}: {created}"
    assert not (scratch / "m" / "fleet").exists(), "destroy left the fleet directory behind"
