"""Every Spark of the fleet serves v0.2.0 after ds4.converge.canary: checked on the host, over the same ssh.

Run by molecule's testinfra verifier (pytest --ansible-inventory ... --connection ansible, through the fleet's
ssh_config); each test runs once per host of the inventory.
"""
import hashlib
import json
import os
from pathlib import Path

import pytest
import yaml

FLEET_DIR = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "fleet"
PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
# what the host's templated variables are (ports, paths, the tool): Ansible itself answers, from the inventory
FACTS = ("{{ {'bin': ds4_converge_install_venv ~ '/bin/ds4-converge', 'spec_path': ds4_converge_spec_path,"
         " 'spec': ds4_converge_spec, 'venv': ds4_converge_install_venv, 'python': ansible_playbook_python}"
         " | to_json }}")
WHERE_FROM = ("import json, ds4_converge, importlib.metadata as m; print(ds4_converge.__file__); "
              "print(json.loads(m.distribution('ds4-converge').read_text('direct_url.json'))['url'])")
GET_MODELS = ("import json, sys, urllib.request; "
              "print(json.dumps([m['id'] for m in json.load(urllib.request.urlopen(sys.argv[1], timeout=10))['data']]))")


@pytest.fixture(scope="module")
def box(host):
    facts = json.loads(host.ansible("debug", f"msg={FACTS}", check=False)["msg"])
    facts["name"] = host.ansible.get_variables()["inventory_hostname"]
    facts["port"] = int(facts["spec"]["server"]["port"])
    facts["root"] = facts["spec"]["paths"]["root"]
    facts["program"] = facts["spec"].get("server", {}).get("name", "ds4")
    return facts


@pytest.fixture(scope="module")
def status(host, box):
    result = host.run(f"{box['bin']} status {box['spec_path']} --json")
    assert result.rc == 0, (result.rc, result.stdout, result.stderr)
    return json.loads(result.stdout)


def test_spec_on_the_host_is_the_inventory_spec(host, box):
    spec_file = host.file(box["spec_path"])
    assert spec_file.exists and spec_file.mode == 0o644
    assert yaml.safe_load(spec_file.content_string) == box["spec"]


def test_tool_is_the_wheel_built_from_this_repository(host, box):
    """Installed from the pushed wheel into the host's venv: not the project's editable install, not an index."""
    wheels = sorted((PROJECT / "build" / "wheels").glob("ds4_converge-*.whl"))
    assert wheels, "the role's wheel entry point kept no wheel in build/wheels"
    pushed = host.file(f"{box['venv']}/wheels/{wheels[-1].name}")
    assert pushed.exists and pushed.sha256sum == hashlib.sha256(wheels[-1].read_bytes()).hexdigest()
    installed = host.file(f"{box['venv']}/wheels/installed.sha1").content_string.strip()
    assert installed == hashlib.sha1(wheels[-1].read_bytes()).hexdigest()
    where = host.check_output(f"{box['venv']}/bin/python -c \"{WHERE_FROM}\"")
    module_file, source = where.splitlines()
    assert module_file.startswith(f"{box['venv']}/lib/") and "site-packages" in module_file
    assert source == f"file://{pushed.path}"
    assert box["bin"] == f"{box['venv']}/bin/ds4-converge" and host.file(box["bin"]).is_file


def test_engine_is_running_and_healthy(status):
    assert status["healthy"] is True
    assert status["state"] == "RUNNING"
    assert isinstance(status["pid"], int) and status["pid"] > 0
    assert status["release"] == status["last_good"]


def test_supervisor_reports_the_program_running(host, box, status):
    program = host.supervisor(box["program"], supervisorctl_path=f"{box['python'].rsplit('/', 1)[0]}/supervisorctl",
                              supervisorctl_conf=f"{box['root']}/supervisor/supervisord.conf")
    assert program.is_running and program.status == "RUNNING"
    assert program.pid == status["pid"]


def test_engine_process_serves_this_hosts_port(host, box, status):
    cmdline = host.file(f"/proc/{status['pid']}/cmdline").content.split(b"\0")
    assert b"--port" in cmdline and cmdline[cmdline.index(b"--port") + 1] == str(box["port"]).encode()
    assert box["root"].encode() in b" ".join(cmdline), "an engine of another box answered"


def test_rendered_program_file(host, box, status):
    program = host.file(f"{box['root']}/supervisor/programs/{box['program']}.conf")
    assert program.exists and program.is_file
    assert program.mode == 0o600  # it may hold secrets (server.env), so only its owner reads it
    assert program.contains(f"--port {box['port']} ")
    assert program.contains(f"release {status['release']}")


def test_models_endpoint_answers_on_the_host(host, box):
    out = host.check_output(f"{box['python']} -c \"{GET_MODELS}\" http://127.0.0.1:{box['port']}/v1/models")
    assert "deepseek-v4-flash" in json.loads(out)


def nested(name: str) -> dict:
    """A nested ansible-playbook run of side_effect.yml: rc, stdout, stderr."""
    return json.loads((FLEET_DIR / f"{name}.json").read_text())


def recap(output: str) -> dict:
    """{host: {ok: N, changed: N, ...}} from a PLAY RECAP."""
    found = {}
    for line in output.split("PLAY RECAP", 1)[1].splitlines()[1:]:
        if ":" in line:
            host, counts = line.split(":", 1)
            found[host.strip()] = {k: int(v) for k, v in (pair.split("=") for pair in counts.split())}
    return found


def test_check_on_the_converged_fleet_changes_nothing(box):
    run = nested("check")
    assert run["rc"] == 0, run["stdout"][-3000:]
    counts = recap(run["stdout"])
    assert counts[box["name"]]["changed"] == 0 and counts[box["name"]]["failed"] == 0, run["stdout"][-3000:]


def test_limit_runs_the_one_box_and_builds_the_wheel(box):
    run = nested("limit")
    assert run["rc"] == 0, run["stdout"][-3000:]
    counts = recap(run["stdout"])
    assert set(counts) == {"spark2"}, counts  # the wheel was built delegated to localhost, outside the limit
    assert counts["spark2"]["changed"] == 0 and counts["spark2"]["failed"] == 0
    assert "Build, then keep the wheel" in run["stdout"] or "Build the wheel" in run["stdout"]


def test_status_table_names_every_box(box, status):
    run = nested("status-run")
    assert run["rc"] == 0, run["stdout"][-3000:]
    assert all(counts["changed"] == 0 for counts in recap(run["stdout"]).values()), run["stdout"][-3000:]
    output = run["stdout"]
    header = next(line for line in output.splitlines() if "BOX" in line and "RELEASE" in line)
    for column in ("HEALTHY", "LAST GOOD", "LAST REVERT", "DECODE TOK/S"):
        assert column in header
    row = next(line for line in output.splitlines() if line.strip(' "').startswith(box["name"] + " "))
    assert status["release"] in row and " yes " in row


def test_fleet_status_playbook_wrote_this_host(box, status):
    """ds4.converge.status (side_effect.yml) wrote one row per host with what the host itself says."""
    document = json.loads((FLEET_DIR / "status.json").read_text())
    rows = {row["host"]: row for row in document["hosts"]}
    assert set(rows) == {"spark1", "spark2", "spark3"}
    row = rows[box["name"]]
    assert row["healthy"] is True and row["state"] == "RUNNING"
    assert (row["release"], row["pid"], row["last_good"]) == (status["release"], status["pid"], status["last_good"])
    assert isinstance(row["uptime_s"], int) and row["uptime_s"] >= 0


def test_status_table_says_unreachable_for_a_box_it_cannot_reach(box, status):
    run = nested("status-unreachable")
    assert run["rc"] == 4, run["stdout"][-3000:]  # Ansible's exit status for unreachable hosts, after the table
    header = next(line for line in run["stdout"].splitlines() if "BOX" in line and "RELEASE" in line)
    row = next(line for line in run["stdout"].splitlines() if line.strip(' "').startswith(box["name"] + " "))
    column = header.index("LAST GOOD")  # every word stays in its column, "unreachable" too
    assert row[column - 2:column] == "  " and row[column] != " ", (header, row)
    if box["name"] == "spark3":
        assert " unreachable " in row, row
    else:
        assert status["release"] in row and " yes " in row, row
    table = json.loads((FLEET_DIR / "status-unreachable-table.json").read_text())
    rows = {row["host"]: row for row in table["hosts"]}
    assert rows["spark3"]["state"] == "unreachable" and rows["spark3"]["healthy"] is None
