"""Command-line values are checked like spec values: a value out of range, infinite or not a number is a usage
error (exit 2) naming the option, never an internal error or a flood of output; --version --json is one document."""
import json

import pytest

from ds4_converge.cli.main import main as run

SPEC = "/nonexistent/spec.yaml"  # never read: the arguments are refused first


@pytest.mark.parametrize("argv, option", [
    ([SPEC, "--progress-interval", "-1"], "--progress-interval"),
    ([SPEC, "--progress-interval", "nan"], "--progress-interval"),
    ([SPEC, "--progress-interval", "inf"], "--progress-interval"),
    ([SPEC, "--progress-interval", "1e-9"], "--progress-interval"),
    (["tune", SPEC, "--reps", "-1"], "--reps"),
    (["tune", SPEC, "--reps", "0"], "--reps"),
    (["tune", SPEC, "--power", "0,50"], "--power"),
    (["bench", SPEC, "--gen-tokens", "-5"], "--gen-tokens"),
    (["bench", SPEC, "--concurrency", "0"], "--concurrency"),
    (["bench", SPEC, "--prompt-tokens", "512,-1"], "--prompt-tokens"),
    (["logs", SPEC, "--lines", "-3"], "--lines"),
])
def test_a_bad_cli_value_is_a_usage_error_naming_the_option(argv, option, capsys):
    assert run([*argv, "--json"]) == 2
    document = json.loads(capsys.readouterr().out)
    assert document["aborted"] == "usage" and "argument " in document["error"] and option in document["error"]
    assert run(argv) == 2
    assert option in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "0.5", "30"])
def test_a_good_progress_interval_passes_to_the_spec(value, capsys):
    assert run([SPEC, "--progress-interval", value, "--json"]) == 2  # the spec file is what is missing now
    assert "spec" in json.loads(capsys.readouterr().out)["error"]


def test_version_with_json_is_one_document(capsys):
    assert run(["--version", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["command"] == "version" and document["ok"] and document["version"]
