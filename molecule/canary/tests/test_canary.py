"""After a broken engine was rolled over the fleet (side_effect.yml): the canary reverted, nobody else moved.

Run by molecule's testinfra verifier, once per host. The records side_effect.yml saved (status and spec file
before the rollout, the nested ansible-playbook's exit status and output) are read on the controller.
"""
import json
import os
import re
from pathlib import Path

import pytest
import yaml

FLEET_DIR = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "fleet"
BAD_REF = "v0.3.1-crash-at-start"
FACTS = ("{{ {'bin': ds4_converge_install_venv ~ '/bin/ds4-converge', 'spec_path': ds4_converge_spec_path}"
         " | to_json }}")


@pytest.fixture(scope="module")
def rollout():
    return json.loads((FLEET_DIR / "rollout.json").read_text())


@pytest.fixture(scope="module")
def recap(rollout):
    """PLAY RECAP lines: host -> {'ok': n, 'changed': n, 'failed': n, ...}."""
    lines = rollout["stdout"].split("PLAY RECAP", 1)[-1].splitlines()
    return {m[1]: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m[2])}
            for m in (re.match(r"^(\S+)\s+:\s+(.*)$", line) for line in lines) if m}


@pytest.fixture(scope="module")
def box(host):
    variables = host.ansible.get_variables()
    facts = json.loads(host.ansible("debug", f"msg={FACTS}", check=False)["msg"])
    name = variables["inventory_hostname"]
    before = json.loads((FLEET_DIR / f"before-{name}.json").read_text())
    after = json.loads(host.check_output(f"{facts['bin']} status {facts['spec_path']} --json"))
    spec_file = host.file(facts["spec_path"])
    return {"name": name, "canary": name == variables["groups"]["sparks"][0], "before": before, "after": after,
            "spec": yaml.safe_load(spec_file.content_string), "spec_sha256": spec_file.sha256sum,
            "spec_mtime": int(spec_file.mtime.timestamp())}


def test_the_rollout_failed(rollout):
    assert rollout["rc"] == 2, rollout["stdout"][-2000:] + rollout["stderr"][-2000:]


def test_fleet_was_serving_v020_before(box):
    before = box["before"]["status"]
    assert before["healthy"] and before["pid"] and before["release"] == before["last_good"]


def test_canary_failed_and_reverted(box, rollout, recap):
    if not box["canary"]:
        pytest.skip(f"{box['name']} is not the canary")
    before, after = box["before"]["status"], box["after"]
    assert recap[box["name"]]["failed"] == 1, recap
    failure = next(line for line in rollout["stderr"].splitlines() if line.startswith(f"fatal: [{box['name']}]"))
    result = json.loads(failure.split(" => ", 1)[1])  # what the ds4_converge module returned
    assert result["msg"].startswith("ds4-converge exited 1 (failed): probe:"), result["msg"]
    assert f"| reverted: true | serving: {before['release']}" in result["msg"]
    assert result["reverted"] is True and result["release"] == before["release"] and result["rc"] == 1
    # the box was asked for the broken engine, tried it, and serves its last good release again
    assert box["spec"]["engine"]["ref"] == BAD_REF
    assert after["healthy"] is True and after["state"] == "RUNNING"
    assert after["release"] == before["release"] == after["last_good"] == before["last_good"]
    assert after["pid"] != before["pid"], "the canary never restarted: the broken engine was not tried"


def test_other_hosts_untouched(box, recap):
    if box["canary"]:
        pytest.skip(f"{box['name']} is the canary")
    before, after = box["before"]["status"], box["after"]
    assert box["name"] not in recap, f"the play reached {box['name']}: {recap}"
    assert (after["pid"], after["release"], after["healthy"]) == (before["pid"], before["release"], True)
    assert box["spec"]["engine"]["ref"] == "v0.2.0"
    assert (box["spec_sha256"], box["spec_mtime"]) == (box["before"]["spec_sha256"], box["before"]["spec_mtime"])
