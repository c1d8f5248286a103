"""The fleet behind HAProxy after side_effect.yml's rollouts under traffic: no request failed, every box that
restarted was out of the backend first, none answered while it was out, and each run ended with every box back.

A box is taken out (drained, then maintenance) before it switches and put back only after its new release (or,
after a revert, its last good one) answered the load balancer's probe; so an answer from a box while it was in
the backend is an answer from a release that passed its probe. traffic.py recorded every answer (status, the
server HAProxy chose, when) and polled HAProxy's view of each server every 50 ms.
Run by molecule's testinfra verifier (once per host: each host checks its own server's record).
"""
import json
import os
import re
from pathlib import Path

import pytest

FLEET_DIR = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "fleet"
FACTS = ("{{ {'bin': ds4_converge_install_venv ~ '/bin/ds4-converge', 'spec_path': ds4_converge_spec_path}"
         " | to_json }}")


def traffic(name: str) -> dict:
    return json.loads((FLEET_DIR / "haproxy" / f"traffic-{name}.json").read_text())


def nested(name: str) -> dict:
    return json.loads((FLEET_DIR / f"haproxy-{name}.json").read_text())


def out_windows(polls: list[dict], server: str) -> list[tuple[float, float]]:
    """When HAProxy had the server out of the backend (MAINT or DRAIN), as (first seen, last seen)."""
    windows, start, last = [], None, None
    for poll in polls:
        status = poll.get("servers", {}).get(server)
        if status is None:
            continue
        out = status.startswith(("MAINT", "DRAIN"))
        if out and start is None:
            start = poll["at"]
        if not out and start is not None:
            windows.append((start, last))
            start = None
        last = poll["at"]
    if start is not None:
        windows.append((start, last))
    return windows


@pytest.fixture(scope="module")
def box(host):
    name = host.ansible.get_variables()["inventory_hostname"]
    facts = json.loads(host.ansible("debug", f"msg={FACTS}", check=False)["msg"])
    status = json.loads(host.run(f"{facts['bin']} status {facts['spec_path']} --json").stdout)
    return {"name": name, "status": status}


ROLLOUTS = ["upgrade", "putback", "overrides", "rolled_back", "lost", "recovered", "orphaned", "bad", "invalid"]
# who was out of the backend in each: every box that restarted (and spark3, left in maintenance before putback;
# spark2, taken out and then lost; spark2 again, whose supervisord was killed)
OUT = {"upgrade": {"spark1", "spark2", "spark3"}, "putback": {"spark3"}, "overrides": {"spark1", "spark2", "spark3"},
       "rolled_back": {"spark1", "spark2", "spark3"}, "lost": {"spark1", "spark2"}, "recovered": {"spark2", "spark3"},
       "orphaned": {"spark2"}, "bad": {"spark1"}, "invalid": set()}
# a box that cannot be reached is not known to be healthy: it stays out until a run finds it so
STAYS_OUT = {"lost": {"spark2"}}


@pytest.mark.parametrize("rollout", ROLLOUTS)
def test_no_request_failed(rollout):
    answers = traffic(rollout)["answers"]
    assert len(answers) >= 50, f"too little traffic to tell: {len(answers)} requests"
    failed = [a for a in answers if not a["ok"]]
    assert failed == [], f"{len(failed)} of {len(answers)} requests failed: {failed[:5]}{front_door_errors()}"


def front_door_errors() -> str:
    """What the boxes' own front doors logged of answers other than 2xx/401 (HAProxy's httplog: its termination
    state says who closed what), for a failure's message."""
    lines = [f"{log.parts[-4]}: {line}" for log in sorted(FLEET_DIR.glob("*/root/logs/front.log*"))
             for line in log.read_text(errors="replace").splitlines()
             if re.search(r"\s(5\d\d|40[02-9]|4[1-9]\d) \d+ ", line)]
    return "\nfront doors' log:\n" + "\n".join(lines[-20:]) if lines else ""


@pytest.mark.parametrize("rollout", ROLLOUTS)
def test_no_answer_from_a_box_while_it_was_out(box, rollout):
    record = traffic(rollout)
    windows = out_windows(record["polls"], box["name"])
    if box["name"] in OUT[rollout]:
        assert windows, f"{box['name']} was never taken out of the backend during {rollout}"
    else:
        assert windows == [], f"{box['name']} was taken out during {rollout}, though it did not restart"
    # a request that began before the box was seen out may still end during the drain: that is what drain is for
    during = [a for a in record["answers"] if a["server"] == box["name"]
              and any(start < a["start"] and a["end"] < end for start, end in windows)]
    assert during == [], f"{box['name']} answered while out of the backend: {during[:5]}"
    served = [a for a in record["answers"] if a["server"] == box["name"]]
    assert served, f"{box['name']} served nothing during {rollout}"


@pytest.mark.parametrize("rollout", ROLLOUTS)
def test_every_run_ends_with_every_healthy_box_in_the_backend(box, rollout):
    last = [poll for poll in traffic(rollout)["polls"] if "servers" in poll][-1]
    if box["name"] in STAYS_OUT.get(rollout, ()):
        assert last["servers"][box["name"]].startswith("MAINT"), (rollout, last)
    else:
        assert last["servers"][box["name"]].startswith("UP"), (rollout, last)


def test_the_upgrade_reached_every_box_and_the_bad_release_only_the_canary(box):
    upgrade, bad = nested("upgrade"), nested("bad")
    assert upgrade["rc"] == 0, upgrade["stdout"][-3000:]
    for name in ("putback", "overrides", "rolled_back", "orphaned"):
        assert nested(name)["rc"] == 0, nested(name)["stdout"][-3000:]
    assert bad["rc"] == 2, bad["stdout"][-3000:]
    assert "The rollout stops before batch 2 of 3: spark1 failed" in bad["stdout"] + bad["stderr"]
    # the recap blames the canary, and the closing plays ran
    assert re.search(r"^spark1\s+:.*\bfailed=1\b", bad["stdout"], re.MULTILINE), bad["stdout"][-3000:]
    assert re.search(r"^spark2\s+:.*\bfailed=0\b", bad["stdout"], re.MULTILINE), bad["stdout"][-3000:]
    assert "spark1 failed its turn in the rollout: ds4-converge exited 1" in bad["stdout"] + bad["stderr"]
    lost, recovered = nested("lost"), nested("recovered")
    assert lost["rc"] == 2 and "spark2 was lost while it converged" in lost["stdout"] + lost["stderr"], \
        lost["stdout"][-3000:]
    assert re.search(r"^spark2\s+:.*\bfailed=1\b", lost["stdout"], re.MULTILINE), lost["stdout"][-3000:]
    assert recovered["rc"] == 0, recovered["stdout"][-3000:]
    invalid = nested("invalid")
    assert invalid["rc"] == 2 and "server.port" in invalid["stdout"] + invalid["stderr"], invalid["stdout"][-3000:]
    status = box["status"]
    assert status["healthy"] is True and status["release"] == status["last_good"]
    assert status["release"].startswith(tuple("0123456789abcdef"))
    if box["name"] == "spark1":
        assert status["last_revert"] and status["last_revert"]["release"] == status["release"]
    else:
        assert status["last_revert"] is None


def test_a_box_with_its_own_front_door_is_balanced_through_it(box):
    """Each box runs its own front door (its spec's `front`), all on one port, each on its own address: the
    fleet's backend reaches it there, never at its engine's loopback slots."""
    config = (FLEET_DIR / "haproxy" / "haproxy.cfg").read_text()
    addresses = re.findall(r"^\s*server \S+ (\S+)$", config, re.MULTILINE)
    assert len(addresses) == 3 and len({a.rsplit(":", 1)[1] for a in addresses}) == 1, addresses  # one port
    (address,) = re.findall(rf"^\s*server {box['name']} (\S+)$", config, re.MULTILINE)
    front = box["status"].get("front")
    assert front and front["up"] and front["points_at"], box["status"]
    assert front["url"] == f"http://{address}", (front, address)
    assert box["status"]["endpoint"] != f"http://{address}"
    assert "unsupervised_pid" not in front, front  # spark2's orphaned front door was replaced


def test_a_box_out_when_its_turn_begins_is_back_when_its_turn_succeeds():
    """putback: spark3 starts out of the backend and has nothing to change; it is put back in its own turn, not
    only by the closing play (one box less for the whole rollout)."""
    stdout = nested("putback")["stdout"]
    turns = stdout.split("PLAY [Put every healthy host back in the load balancer]")[0]
    back = turns.split("TASK [ds4.converge.ds4_converge : Put the host back in the load balancer]")
    assert len(back) == 2 and re.match(r"[\s*]*changed: \[spark3", back[1]), turns[-3000:]


def test_a_killed_supervisord_does_not_keep_its_box_out():
    """orphaned: spark2's supervisord was SIGKILLed; its still-serving front door is this box's own (not a
    stranger on its port): the run drains spark2, replaces what runs unsupervised and puts it back."""
    orphaned = nested("orphaned")
    assert orphaned["rc"] == 0, orphaned["stdout"][-3000:]
    assert "does not manage" not in orphaned["stdout"], orphaned["stdout"][-3000:]


def test_the_watchdog_never_restarted_a_box(box):
    """Every engine that stopped was stopped by a run (none crashed or hung): a watchdog incident here is a
    watchdog that watched the wrong engine (a front door's other slot after a rollback restarted a healthy one)."""
    watchdog = box["status"]["watchdog"]
    assert watchdog["incidents"] == 0, (box["name"], watchdog)
