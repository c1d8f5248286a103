"""The role's entry point `prometheus` (ds4.converge.prometheus) on an inventory of three boxes, one without a
front door and one whose exporter listens on every address: a prometheus.yml promtool accepts, a target per box
and job, labelled with the box, and the rules and dashboard beside it. Ansible runs for real (a few seconds)."""
from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

import prometheus_playbook

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")]

HOSTS = {
    "spark1": {"ansible_host": "127.0.0.1", "ds4_converge_node_exporter_port": 19100,
               "ds4_converge_spec": {"front": {"port": 8000, "keys": "/k", "metrics": {"host": "127.0.0.1", "port": 18405}}}},
    "spark2": {"ansible_host": "10.0.0.2", "ds4_converge_spec": {"server": {"port": 8001}}},
    "spark3": {"ansible_host": "10.0.0.3",
               "ds4_converge_spec": {"front": {"port": 8000, "keys": "/k", "metrics": {"host": "0.0.0.0", "port": 8405}}}},
}


def test_a_scrape_job_per_source_a_target_per_box_each_labelled_with_its_box(tmp_path):
    out = prometheus_playbook.run(HOSTS, tmp_path, "ds4_converge_haproxy_metrics=lb:8405")
    assert sorted(p.name for p in out.iterdir()) == ["ds4-converge-dashboard.json", "ds4-converge-rules.yml",
                                                      "prometheus.yml"]
    checked = subprocess.run(["promtool", "check", "config", str(out / "prometheus.yml")], capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    config = yaml.safe_load((out / "prometheus.yml").read_text())
    jobs = {job["job_name"]: [(c["targets"], c.get("labels")) for c in job["static_configs"]]
            for job in config["scrape_configs"]}
    assert jobs == {
        # spark2 has no front door; spark3's exporter listens everywhere: reached at its ansible_host
        "ds4_front": [(["127.0.0.1:18405"], {"box": "spark1"}), (["10.0.0.3:8405"], {"box": "spark3"})],
        # a box's own node_exporter port, else 9100
        "ds4_node": [(["127.0.0.1:19100"], {"box": "spark1"}), (["10.0.0.2:9100"], {"box": "spark2"}),
                     (["10.0.0.3:9100"], {"box": "spark3"})],
        "ds4_balancer": [(["lb:8405"], None)],
    }
    assert config["rule_files"] == ["ds4-converge-rules.yml"]
