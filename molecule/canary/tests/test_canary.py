"""After the rollouts of side_effect.yml: each stopped where it had to, and the boxes show it.

Run by molecule's testinfra verifier, once per host. The records side_effect.yml saved (status and spec file
before and between the rollouts, each nested ansible-playbook's exit status and output) are read on the
controller; what each box serves now is asked on the box.
"""
import json
import os
import re
from pathlib import Path

import pytest

FLEET_DIR = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "fleet"
FACTS = ("{{ {'bin': ds4_converge_install_venv ~ '/bin/ds4-converge', 'spec_path': ds4_converge_spec_path}"
         " | to_json }}")


def run(name: str) -> dict:
    """A nested ansible-playbook run: rc, stdout, stderr, and its recap {host: {ok: n, failed: n, ...}}."""
    found = json.loads((FLEET_DIR / f"{name}.json").read_text())
    lines = found["stdout"].split("PLAY RECAP", 1)[-1].splitlines()
    found["recap"] = {m[1]: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m[2])}
                      for m in (re.match(r"^(\S+)\s+:\s+(.*)$", line) for line in lines) if m}
    found["output"] = found["stdout"] + found["stderr"]
    return found


def record(name: str, host: str) -> dict:
    return json.loads((FLEET_DIR / f"{name}-{host}.json").read_text())


def failure(output: str, host: str) -> dict:
    """What the ds4_converge module returned on the host when it failed (`fatal: [HOST]: FAILED! => {...}`)."""
    for line in output.splitlines():
        if line.startswith(f"fatal: [{host}]") and " => " in line:
            result = json.loads(line.split(" => ", 1)[1])
            if "reverted" in result:
                return result
    raise AssertionError(f"no failure of the ds4_converge module on {host}:\n{output[-3000:]}")


@pytest.fixture(scope="module")
def box(host):
    name = host.ansible.get_variables()["inventory_hostname"]
    facts = json.loads(host.ansible("debug", f"msg={FACTS}", check=False)["msg"])
    now = host.run(f"{facts['bin']} status {facts['spec_path']} --json")
    return {"name": name, "before": record("before", name), "middle": record("middle", name),
            "now": json.loads(now.stdout)}


def test_fleet_was_serving_v020_before(box):
    before = box["before"]["status"]
    assert before["healthy"] and before["pid"] and before["release"] == before["last_good"]


def test_a_broken_engine_stops_at_the_canary(box):
    rollout = run("rollout")
    assert rollout["rc"] == 2, rollout["output"][-3000:]
    if box["name"] == "spark1":
        result = failure(rollout["output"], "spark1")
        assert result["msg"].startswith("ds4-converge exited 1 (failed): probe:"), result["msg"]
        assert result["reverted"] is True and result["release"] == box["before"]["status"]["release"]
        # its turn was rescued (to put it back in the balancer), and the closing play blames it in the recap
        assert rollout["recap"]["spark1"]["rescued"] == 1 and rollout["recap"]["spark1"]["failed"] == 1
        # it tried the broken engine (a new PID), and its last good release serves again
        assert box["middle"]["status"]["pid"] != box["before"]["status"]["pid"]
        assert box["middle"]["status"]["release"] == box["before"]["status"]["release"]
    else:
        assert rollout["recap"].get(box["name"], {}).get("changed", 0) == 0, rollout["recap"]
    assert "The rollout stops before batch 2 of 3: spark1 failed" in rollout["output"]


def test_an_unreachable_canary_stops_the_rollout(box):
    unreachable = run("unreachable")
    assert unreachable["rc"] != 0, unreachable["output"][-3000:]
    assert "spark1 cannot be reached" in unreachable["output"]
    assert "The rollout stops before batch 2 of 3: spark1 failed or could not be reached" in unreachable["output"]
    if box["name"] != "spark1":
        assert unreachable["recap"].get(box["name"], {}).get("changed", 0) == 0, unreachable["recap"]


def test_nobody_but_the_canary_moved_in_the_first_two_rollouts(box):
    if box["name"] == "spark1":
        pytest.skip("the canary tried the broken engine")
    before, middle = box["before"], box["middle"]
    assert (middle["status"]["pid"], middle["status"]["release"]) == (before["status"]["pid"], before["status"]["release"])
    assert (middle["spec_sha256"], middle["spec_mtime"]) == (before["spec_sha256"], before["spec_mtime"])


def test_a_failing_host_stops_the_rest_of_its_batch(box):
    midbatch = run("midbatch")
    assert midbatch["rc"] == 2, midbatch["output"][-3000:]
    assert "spark2 failed its turn in the rollout: ds4-converge exited 1" in midbatch["output"]
    assert midbatch["recap"]["spark2"]["failed"] == 1 and midbatch["recap"]["spark1"]["failed"] == 0
    assert "Not switched: spark2 failed earlier in batch 2" in midbatch["output"]
    middle = box["middle"]["status"]
    if box["name"] == "spark2":
        result = failure(midbatch["output"], "spark2")
        assert result["reverted"] is True and result["release"] == middle["release"]
    if box["name"] == "spark3":  # in spark2's batch, after it: not switched, then stopped by step 5
        assert midbatch["recap"]["spark3"]["changed"] == 0, midbatch["recap"]


def test_rollback_through_ansible(box):
    rollback = run("rollback")
    assert rollback["rc"] == 0, rollback["output"][-3000:]
    assert set(rollback["recap"]) == {"spark1"}, rollback["recap"]
    if box["name"] == "spark1":  # v0.3.0 (last good after midbatch) rolled back to v0.2.0's release
        now = box["now"]
        assert now["healthy"] is True and now["release"] == box["before"]["status"]["release"]


def test_stop_through_ansible(box):
    stop = run("stop")
    assert stop["rc"] == 0, stop["output"][-3000:]
    assert set(stop["recap"]) == {"spark3"} and stop["recap"]["spark3"]["changed"] >= 1, stop["recap"]
    if box["name"] == "spark3":
        assert box["now"]["pid"] is None and box["now"]["healthy"] is False
        assert box["now"]["last_good"] == box["before"]["status"]["release"]  # it never moved before the stop
    elif box["name"] == "spark2":  # reverted in midbatch, still serving its last good
        assert box["now"]["healthy"] is True and box["now"]["release"] == box["before"]["status"]["release"]
