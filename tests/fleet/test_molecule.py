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

import shutil

import pytest

from molecule_support import PYTESTMARK, SCENARIO_TIMEOUT_S, run_scenario, scratch_dir

from ds4_converge.facts import programs

pytestmark = PYTESTMARK


def test_openssh_client_is_installed():
    """Ansible's ssh connection (and testinfra) run the OpenSSH client; a server is not needed."""
    missing = [tool for tool in ("ssh", "sftp") if shutil.which(tool) is None]
    assert not missing, f"{missing} not found: install the OpenSSH client (Debian: apt-get install openssh-client)"


def test_haproxy_is_installed():
    """The haproxy scenario runs the distribution's HAProxy (as the test user; its system service is not used)."""
    assert programs.haproxy(), (
        "haproxy not found: install it (Debian: apt-get install haproxy; .ci/fleet-deps.sh does)")


@pytest.mark.timeout(SCENARIO_TIMEOUT_S + 120)
def test_molecule_default_scenario():
    """Converge a fresh fleet, --check and --limit on it, the status table (molecule/default)."""
    with scratch_dir() as scratch:
        run_scenario("default", scratch)
