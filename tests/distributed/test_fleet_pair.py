"""playbooks/distributed.yml over real ssh: a coordinator and a worker, converged in order, reverted together.

The real pair cannot serve on a CPU build (test_real_pair_cpu.py), so the two boxes run the simulated engine
with its distributed mode on (engine/sim/ds4_distributed.py: `distributed = 1` in sim.conf, committed here on
top of the simulator's v0.2.0 and v0.3.0). Each "box" is an ssh connection to the fleet tests' own loopback
server (molecule/shared/loopback_sshd.py), with its own root; Ansible and the tool run for real. (Specs that do
not fit together stop the play at `deployment-check`, whose verdicts test_deployment_check.py covers: a play
here costs ~1 minute on a loaded 2-core box.)
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from boxes import MODEL, free_port

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
@pytest.fixture
def fleet():
    """The loopback ssh server (short paths: ssh's control sockets must fit ~100 bytes)."""
    with tempfile.TemporaryDirectory(prefix="ds4-d.") as path:
        scratch = Path(path)
        subprocess.run([sys.executable, str(REPO / "molecule" / "shared" / "loopback_sshd.py"), "start",
                        str(scratch / "ssh")], check=True, capture_output=True, timeout=60)
        try:
            yield scratch
        finally:
            subprocess.run([sys.executable, str(REPO / "molecule" / "shared" / "loopback_sshd.py"), "stop",
                            str(scratch / "ssh")], capture_output=True, timeout=60)


def _spec(repo, commit, ref, root, http_port, part, env=None) -> dict:
    return {"engine": {"repo": str(repo), "ref": ref, "commit": commit, "target": "cpu", "jobs": 2},
            "model": {"main": {"source": str(MODEL), "sha256": hashlib.sha256(MODEL.read_bytes()).hexdigest()}},
            "server": {"port": http_port, "ctx": 32768, "stop_wait_s": 20,
                       "env": {"DS4_SIM_LOAD_SECONDS": "0.3", **(env or {})}},
            "health": {"deadline_s": 15, "soak_s": 1, "interval_s": 0.2},
            "paths": {"root": str(root)}, "distributed": part}


class Pair:
    def __init__(self, scratch: Path, repo: Path, commits: dict):
        self.scratch, self.repo, self.commits = scratch, repo, commits
        self.http = {"coord": free_port(), "work": free_port()}
        self.dist_port, self.data_port = free_port(), free_port()

    def inventory(self, ref: str, coordinator_env: dict | None = None) -> Path:
        parts = {"coord": {"role": "coordinator", "layers": "0:21",
                           "listen": {"host": "127.0.0.1", "port": self.dist_port}},
                 "work": {"role": "worker", "layers": "22:output",
                          "listen": {"host": "127.0.0.1", "port": self.data_port},
                          "coordinator": {"host": "127.0.0.1", "port": self.dist_port}}}
        hosts = {name: {"ds4_converge_spec_path": str(self.scratch / f"{name}.yaml"),
                        "ds4_converge_spec": _spec(self.repo, self.commits[ref], ref, self.scratch / f"{name}-root",
                                                   self.http[name], part,
                                                   coordinator_env if name == "coord" else None)}
                 for name, part in parts.items()}
        inventory = {"ds4_distributed": {"hosts": hosts, "vars": {
            "ansible_connection": "ssh", "ansible_python_interpreter": sys.executable,
            "ansible_ssh_common_args": f"-F {self.scratch / 'ssh' / 'ssh_config'}",
            "ansible_ssh_transfer_method": "sftp",
            "ds4_converge_bin": str(BIN / "ds4-converge"), "ds4_distributed_build_wheel": False}}}
        path = self.scratch / "inventory.yml"
        path.write_text(yaml.safe_dump(inventory))
        return path

    def play(self, inventory: Path) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
        env.update(ANSIBLE_HOME=str(self.scratch / "a"), ANSIBLE_LOCAL_TEMP=str(self.scratch / "a" / "tmp"),
                   ANSIBLE_REMOTE_TEMP=str(self.scratch / "a" / "remote"),
                   ANSIBLE_SSH_CONTROL_PATH_DIR=str(self.scratch / "cp"), ANSIBLE_ROLES_PATH=str(REPO / "roles"),
                   ANSIBLE_PIPELINING="true", ANSIBLE_NOCOLOR="1", NO_COLOR="1", ANSIBLE_HOST_KEY_CHECKING="false",
                   PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", DS4_CONVERGE_WARM="0")
        return subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory),
                               str(REPO / "playbooks" / "distributed.yml"), "-e", "ds4_distributed_build_wheel=false"],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=400)

    def status(self, name: str) -> dict:
        proc = subprocess.run([str(BIN / "ds4-converge"), "status", str(self.scratch / f"{name}.yaml"), "--json"],
                              capture_output=True, text=True, timeout=60)
        return json.loads(proc.stdout)

    def stop(self):
        for name in self.http:
            if (self.scratch / f"{name}.yaml").exists():
                subprocess.run([str(BIN / "ds4-converge"), "stop", str(self.scratch / f"{name}.yaml")],
                               capture_output=True, timeout=120)


def test_workers_first_then_the_coordinator_and_a_failed_pair_goes_back_together(fleet, dist_repo):
    repo, commits = dist_repo
    pair = Pair(fleet, repo, commits)
    try:
        play = pair.play(pair.inventory("v0.2.0-dist"))
        assert play.returncode == 0, play.stdout[-4000:]
        out = play.stdout
        assert out.index("TASK [Converge this worker]") < out.index("TASK [Converge the coordinator (its probe")
        coordinator, worker = pair.status("coord"), pair.status("work")
        assert coordinator["healthy"] and coordinator["release"].startswith(commits["v0.2.0-dist"][:12])
        assert worker["distributed"]["connected"] is True, worker
        assert worker["release"].startswith(commits["v0.2.0-dist"][:12])
        # the worker started first: it retried until the coordinator listened
        log = (fleet / "work-root" / "logs").glob("*.log")
        assert any("unable to connect" in p.read_text() for p in log)

        # a new commit for both; the coordinator's smoke answer is wrong with it: both go back to v0.2.0-dist
        play = pair.play(pair.inventory("v0.3.0-dist", coordinator_env={"DS4_SIM_FAULT": "wrong-answer"}))
        assert play.returncode != 0
        assert "the distributed deployment is not healthy: coord:" in play.stdout, play.stdout[-4000:]
        assert "work rolled back" in play.stdout
        coordinator, worker = pair.status("coord"), pair.status("work")
        assert coordinator["healthy"] and worker["healthy"], (coordinator, worker)
        assert coordinator["release"].startswith(commits["v0.2.0-dist"][:12]), coordinator
        assert worker["release"].startswith(commits["v0.2.0-dist"][:12]), worker
        assert worker["distributed"]["role"] == "worker"
    finally:
        pair.stop()
