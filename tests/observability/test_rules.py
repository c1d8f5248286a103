"""The alert rules shipped with the collection: `promtool check rules` accepts them, and `promtool test rules`
(tests/observability/rules_test.yml) sees every alert both fire and stay quiet on synthetic series."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ds4_converge.core.memory_fit import FREE_RESERVE_BYTES

HERE = Path(__file__).parent
RULES = HERE.parents[1] / "roles" / "ds4_converge" / "files" / "prometheus" / "ds4-converge-rules.yml"
UNIT_TESTS = HERE / "rules_test.yml"

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None,
                                reason="promtool is not installed (Debian: apt-get install prometheus)")


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120, cwd=HERE)


def rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_promtool_checks_the_rules():
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules())} rules found" in checked.stdout


def test_promtool_unit_tests_pass_with_every_alert_firing_and_quiet():
    tested = promtool("test", "rules", UNIT_TESTS.name)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    cases = [case for test in yaml.safe_load(UNIT_TESTS.read_text())["tests"] for case in test.get("alert_rule_test", [])]
    for alert in [rule["alert"] for rule in rules() if "alert" in rule]:
        seen = [case["exp_alerts"] for case in cases if case["alertname"] == alert]
        assert any(seen), f"{alert}: no case where it fires"
        assert any(not alerts for alerts in seen), f"{alert}: no case where it stays quiet"


def test_the_memory_alert_keeps_the_tool_s_own_reserve():
    [memory] = [rule for rule in rules() if rule.get("alert") == "Ds4MemoryBelowReserve"]
    assert memory["expr"].endswith(f"< {FREE_RESERVE_BYTES}")
