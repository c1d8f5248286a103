"""The command line itself: help for every flag, the SPEC shorthand, the safety net, signals at start-up."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jsonschema
import pytest
import yaml

from ds4_converge.cli import main as cli
from ds4_converge.cli import report

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ds4_converge.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "NO_COLOR": "1", "COLUMNS": "120"})


def check_document(text: str, exit_code: int) -> dict:
    document = json.loads(text)  # exactly one document: json.loads refuses trailing text
    jsonschema.validate(document, report.schema(), cls=jsonschema.Draft202012Validator)
    assert document["exit_code"] == exit_code
    return document


@pytest.fixture
def spec(tmp_path) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({
        "engine": {"repo": str(tmp_path / "nowhere.git"), "ref": "v0.2.0", "target": "cpu"},
        "model": {"main": str(REPO / "engine/models/tiny-ds4flash.gguf")},
        "server": {"port": 1}, "paths": {"root": str(tmp_path / "root")}}))
    return path


# ----------------------------------------------------------------------------------------------- parser


def test_every_flag_of_every_command_has_help():
    parser = cli.build_parser(cli.registry())
    for name, sub in parser.subparsers.choices.items():
        for action in sub._actions:
            assert action.help and action.help.strip(), f"ds4-converge {name} {action.option_strings or action.dest}"


@pytest.mark.slow  # the CLI in a subprocess
def test_help_lists_every_command_and_explains_one():
    proc = run_cli("help")
    assert proc.returncode == 0
    for name in cli.registry():
        assert f"    {name} " in proc.stdout or f"    {name}\n" in proc.stdout, name  # a long name wraps
    proc = run_cli("help", "status")
    assert proc.returncode == 0 and "never converged" in proc.stdout and "--json" in proc.stdout
    assert run_cli("help", "nope").returncode == 2
    assert run_cli("--help").stdout == run_cli("help").stdout


@pytest.mark.slow  # the CLI in a subprocess
def test_version():
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("ds4-converge ")


def test_a_first_argument_that_is_not_a_command_is_a_spec():
    commands = cli.registry()
    assert cli.normalise(["spec.yaml", "--check"], commands) == ["converge", "spec.yaml", "--check"]
    assert cli.normalise(["--check", "spec.yaml"], commands) == ["converge", "--check", "spec.yaml"]
    assert cli.normalise(["status", "spec.yaml"], commands) == ["status", "spec.yaml"]
    assert cli.normalise(["help"], commands) == ["help"]


def test_a_word_that_is_neither_a_command_nor_a_spec_names_the_commands(tmp_path, monkeypatch, capsys):
    assert cli.main(["frobnicate"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ds4-converge: no command 'frobnicate' and no spec file of that name; commands: converge, ")
    assert "help COMMAND" in err and "cannot read spec" not in err
    assert check_document(_json(["frobnicate", "--json"], capsys), 2)["aborted"] == "usage"
    # a spec is still a spec: a path that exists (whatever its name), or one ending in .yaml/.yml
    monkeypatch.chdir(tmp_path)
    (tmp_path / "frobnicate").write_text("engine: [\n")
    for word in ("frobnicate", "missing.yaml", "missing.yml"):
        assert cli.main([word]) == 2
        assert "no command" not in capsys.readouterr().err, word


def test_a_mistyped_command_gets_a_did_you_mean(capsys):
    assert cli.main(["stauts", "spec.yaml"]) == 2
    assert "no command 'stauts' and no spec file of that name (did you mean 'status'?); commands:" in \
        capsys.readouterr().err
    assert cli.main(["help", "rollbak"]) == 2
    assert "no command 'rollbak' (did you mean 'rollback'?)" in capsys.readouterr().err
    assert cli.main(["frobnicate"]) == 2
    assert "did you mean" not in capsys.readouterr().err  # nothing near: no guess


def test_validate_notes_a_model_file_a_run_here_would_miss_with_its_line_and_the_folder_paths_are_read_from(
        tmp_path, capsys):
    """A spec copied out of the repository keeps its relative paths, which now name other files: still a valid
    spec (its model may be on another host), but validate says what a run here would say, and where."""
    copied = tmp_path / "copy" / "sim.yaml"
    copied.parent.mkdir()
    copied.write_text((REPO / "spec/examples/sim.yaml").read_text())
    assert cli.main(["validate", str(copied)]) == 0
    out = capsys.readouterr().out
    line = next(n for n, text in enumerate(copied.read_text().splitlines(), 1) if text.strip().startswith("main:"))
    assert f"note: a run on this host would fail: {copied}:{line}:3: model.main: " in out, out
    assert (f"(../../engine/models/tiny-ds4flash.gguf, read relative to the spec file's folder {copied.parent})"
            in out), out
    assert "give one: model.main: {source: hf://" in out, out
    document = check_document(_json(["validate", str(copied), "--json"], capsys), 0)
    assert len(document["notes"]) == 1 and "model.main" in document["notes"][0], document
    assert cli.main(["validate", str(REPO / "spec/examples/sim.yaml")]) == 0
    assert "note" not in capsys.readouterr().out  # in place, its model is there


@pytest.mark.slow  # the CLI in a subprocess
def test_a_run_that_misses_a_model_file_names_its_spec_line_and_how_to_give_a_source(tmp_path):
    copied = tmp_path / "copy" / "sim.yaml"
    copied.parent.mkdir()
    copied.write_text((REPO / "spec/examples/sim.yaml").read_text())
    proc = run_cli(str(copied), "--check", "--json", "--set", f"paths.root={tmp_path / 'root'}", "--set",
                   "server.port=1")
    error = check_document(proc.stdout, 1)["error"]
    assert f"{copied}:" in error and ": model.main: " in error, error
    assert "read relative to the spec file's folder" in error and "{source: hf://" in error, error
    assert not (tmp_path / "root").exists()
    # the model found: the installer is the next relative path that names nothing here
    proc = run_cli(str(copied), "--check", "--json", "--set", f"paths.root={tmp_path / 'root'}", "--set",
                   "server.port=1", "--set", f"model.main={REPO / 'engine/models/tiny-ds4flash.gguf'}")
    error = check_document(proc.stdout, 1)["error"]
    assert f"{copied}:" in error and ": engine.installer: " in error, error
    assert f"(../../engine/sim/install.sh, read relative to the spec file's folder {copied.parent})" in error, error


def _json(argv, capsys) -> str:
    cli.main(argv)
    return capsys.readouterr().out


@pytest.mark.slow  # the CLI in a subprocess
def test_no_arguments_is_a_usage_error_that_names_the_commands():
    proc = run_cli()
    assert proc.returncode == 2 and "usage: ds4-converge SPEC" in proc.stderr and "status" in proc.stderr


@pytest.mark.slow  # the CLI in a subprocess
def test_validate_and_facts_json_follow_the_schema(spec):
    proc = run_cli("validate", str(spec), "--json")
    assert check_document(proc.stdout, 0)["spec"] == str(spec)
    proc = run_cli("facts", "--json", "--port", "1")
    assert check_document(proc.stdout, 0)["facts"]["port"] == 1


# ------------------------------------------------------------------------------------------- safety net


def test_an_unexpected_exception_is_one_message_one_document_and_a_log(spec, monkeypatch, capsys, tmp_path):
    def bug(ctx, diff=False):
        raise RuntimeError("boom")

    # no root yet: the log goes to the temporary folder, here the test's own
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    monkeypatch.setattr("ds4_converge.orchestrate.reconciler.converge", bug)
    assert cli.main([str(spec), "--json"]) == 1
    out, err = capsys.readouterr()
    document = check_document(out, 1)
    assert document["aborted"] == "internal" and "RuntimeError: boom" in document["error"], document
    assert Path(document["traceback_log"]).parent == tmp_path
    assert "RuntimeError: boom" in Path(document["traceback_log"]).read_text()
    assert "Traceback" not in out + err

    assert cli.main([str(spec)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "internal error" in err and "RuntimeError: boom" in err and "Traceback" not in err
    assert "--debug" in err

    assert cli.main([str(spec), "--debug"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_the_signal_handlers_are_put_back_after_main(spec, monkeypatch, capsys):
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    cli.main(["validate", str(spec)])
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def _handlers_installed(pid: int) -> bool:
    """Our SIGTERM handler is in place (Python itself catches only SIGINT): main() has started."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = int(next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1], 16)
    return bool(caught & (1 << (signal.SIGTERM - 1)))


@pytest.mark.slow  # the CLI in a subprocess
@pytest.mark.parametrize("json_mode", [False, True], ids=["text", "json"])
def test_ctrl_c_at_start_up_is_a_clean_message(spec, json_mode):
    """Ctrl-C while the tool still imports and reads the spec: one line (or one document), exit 130."""
    args = [sys.executable, "-m", "ds4_converge.cli", str(spec), "--check"] + (["--json"] if json_mode else [])
    run = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not _handlers_installed(run.pid) and time.monotonic() < deadline:
        time.sleep(0.001)
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=60)
    assert run.returncode == 130, (out, err)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    if json_mode:
        document = check_document(out, 130)
        assert document["aborted"] == "interrupted" and "SIGINT" in document["error"]
    else:
        assert "interrupted by SIGINT" in err


# ------------------------------------------------------------------------------------------ for people


def test_the_status_table_has_no_python_words():
    document = report.document("status", ok=False, exit_code=1, error="nothing runs", healthy=False,
                               never_converged=False, state="STOPPED", pid=None, uptime_s=None, last_good=None,
                               last_good_at=None, last_run=None, name="ds4", root="/srv/ds4", spec="s.yaml")
    text = "\n".join(report.plain(line) for line in report.status_lines(document))
    assert "not serving" in text and "last good  none yet" in text
    assert not any(word in text for word in ("None", "True", "False"))


def _status(**fields) -> str:
    document = report.document("status", **{
        "ok": True, "exit_code": 0, "error": None, "healthy": True, "never_converged": False, "state": "RUNNING",
        "pid": 42, "uptime_s": 5, "release": "r1", "endpoint": "http://127.0.0.1:8001", "last_good": "r1",
        "last_good_at": "t", "last_run": None, "name": "ds4", "root": "/srv/ds4", "spec": "s.yaml", **fields})
    check_document(json.dumps(document), document["exit_code"])
    return "\n".join(report.plain(line) for line in report.status_lines(document))


def test_with_a_front_door_status_headlines_its_url_not_the_engines_keyless_slot():
    front = {"url": "http://127.0.0.1:8000", "points_at": "127.0.0.1:8001", "up": True, "metrics": None,
             "problem": None, "slots": []}
    head, *rows = _status(front=front).splitlines()
    assert head == "ds4: healthy, serving release r1 on http://127.0.0.1:8000", head
    assert any("front door" in row and "→ engine 127.0.0.1:8001" in row for row in rows), rows
    assert _status().splitlines()[0].endswith("on http://127.0.0.1:8001")  # no front door: the engine's own


def test_a_box_stopped_on_purpose_says_so():
    head = _status(ok=False, exit_code=1, healthy=False, state="not running", pid=None, release=None, stopped=True,
                   error="stopped on purpose by `ds4-converge stop` at t; start it again with: ds4-converge s.yaml",
                   last_run={"command": "stop", "ok": True, "error": None, "release": None, "finished_at": "t"}
                   ).splitlines()[0]
    assert head.startswith("ds4: stopped on purpose by `ds4-converge stop` at t; start it again with: "), head


def test_the_curl_line_uses_a_model_id_that_v1_models_lists():
    from ds4_converge.health.probe import MODEL_ID

    line = report.curl_line("http://127.0.0.1:8000")
    body = json.loads(line.split(" -d ")[1].strip("'"))
    assert body["model"] == MODEL_ID and line.startswith("curl -s http://127.0.0.1:8000/v1/chat/completions ")
