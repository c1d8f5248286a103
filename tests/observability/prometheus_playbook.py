"""The role's entry point `prometheus` (ds4.converge.prometheus), run for real on an inventory of local hosts: what
the observability tests configure their Prometheus with, and check."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from boxes import REPO

BIN = REPO / ".venv" / "bin"


def run(hosts: dict, directory: Path, *extra_vars: str) -> Path:
    """prometheus.yml, the rules and the dashboard as the role writes them for `hosts` (each reached locally), in
    directory/prometheus; extra_vars: `-e` values."""
    inventory = directory / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"sparks": {"hosts": {
        name: {**values, "ansible_connection": "local", "ansible_python_interpreter": str(BIN / "python")}
        for name, values in hosts.items()}}}))
    out = directory / "prometheus"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    # the remote temp too: the hosts are this machine, and its default (~/.ansible/tmp) is the account's home
    env.update(ANSIBLE_HOME=str(directory / "ansible"), ANSIBLE_LOCAL_TEMP=str(directory / "ansible" / "tmp"),
               ANSIBLE_REMOTE_TEMP=str(directory / "ansible" / "remote"), ANSIBLE_NOCOLOR="1")
    argv = [str(BIN / "ansible-playbook"), "-i", str(inventory), "ds4.converge.prometheus",
            "-e", f"ds4_converge_prometheus_dir={out}"]
    for value in extra_vars:
        argv += ["-e", value]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return out
