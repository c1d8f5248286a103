"""Every Spark of the fleet serves v0.2.0 after roles/fleet.yml: checked on the host, over the same ssh.

Run by molecule's testinfra verifier (pytest --ansible-inventory ... --connection ansible); each test runs once
per host of the inventory.
"""
import json

import pytest
import yaml

# what the host's templated variables are (ports, paths, the tool): Ansible itself answers, from the inventory
FACTS = ("{{ {'bin': ds4_converge_bin, 'spec_path': ds4_converge_spec_path, 'spec': ds4_converge_spec,"
         " 'python': ansible_playbook_python} | to_json }}")


@pytest.fixture(scope="module")
def box(host):
    facts = json.loads(host.ansible("debug", f"msg={FACTS}", check=False)["msg"])
    facts["port"] = int(facts["spec"]["server"]["port"])
    facts["root"] = facts["spec"]["paths"]["root"]
    facts["name"] = facts["spec"].get("server", {}).get("name", "ds4")
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


def test_engine_is_running_and_healthy(status):
    assert status["healthy"] is True
    assert status["state"] == "RUNNING"
    assert isinstance(status["pid"], int) and status["pid"] > 0
    assert status["release"] == status["last_good"]


def test_supervisor_reports_the_program_running(host, box, status):
    program = host.supervisor(box["name"], supervisorctl_path=f"{box['python'].rsplit('/', 1)[0]}/supervisorctl",
                              supervisorctl_conf=f"{box['root']}/supervisor/supervisord.conf")
    assert program.is_running and program.status == "RUNNING"
    assert program.pid == status["pid"]


def test_engine_process_serves_this_hosts_port(host, box, status):
    cmdline = host.file(f"/proc/{status['pid']}/cmdline").content.split(b"\0")
    assert b"--port" in cmdline and cmdline[cmdline.index(b"--port") + 1] == str(box["port"]).encode()
    assert box["root"].encode() in b" ".join(cmdline), "an engine of another box answered"


def test_port_is_listening_on_loopback(host, box):
    assert host.socket(f"tcp://127.0.0.1:{box['port']}").is_listening


def test_rendered_program_file(host, box, status):
    program = host.file(f"{box['root']}/supervisor/programs/{box['name']}.conf")
    assert program.exists and program.is_file
    assert program.mode == 0o644
    assert program.contains(f"--port {box['port']} ")
    assert program.contains(f"release {status['release']}")


def test_models_endpoint_answers(host, box):
    out = host.check_output(f"curl -fsS --max-time 10 http://127.0.0.1:{box['port']}/v1/models")
    assert "deepseek-v4-flash" in [model["id"] for model in json.loads(out)["data"]]
