"""Warm start (cli/warm.py, cli/warm_server.py) with the real CLI, supervisord and engine: a command handed to the
warm process gives what the same command gives without one (output, exit code, the caller's environment and
working directory), signals reach the forked run, and nothing is left running that nobody asked for."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from boxes import free_port, report_document

WARM = {"DS4_CONVERGE_WARM": "1", "DS4_CONVERGE_WARM_IDLE_S": "120"}
COLD = {"DS4_CONVERGE_WARM": "0"}


def warm_folder(box) -> Path:
    return box.user_cache / "ds4-converge" / "warm"


def env_of(box, **extra: str) -> dict:
    """The environment of a CLI run of `box` started here by hand (Box.cli captures its output)."""
    return {**os.environ, "XDG_CACHE_HOME": str(box.user_cache), "NO_COLOR": "1", **extra}


def forked_runs(box) -> list[str]:
    """What the warm processes of this box's user cache forked, from their logs ('run PID: ARGS')."""
    return [line.split(" run ", 1)[1] for log in sorted(warm_folder(box).glob("*.log"))
            for line in log.read_text().splitlines() if " run " in line]


def stop_warm(box) -> None:
    for pidfile in warm_folder(box).glob("*.pid"):
        try:
            os.kill(int(pidfile.read_text()), signal.SIGTERM)
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + 10
    while list(warm_folder(box).glob("*.pid")) and time.monotonic() < deadline:
        time.sleep(0.05)


def wait_serving(box, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if list(warm_folder(box).glob("*.pid")):
            return
        time.sleep(0.05)
    raise AssertionError(f"no warm process started: {[p.read_text() for p in warm_folder(box).glob('*.log')]}")


@pytest.fixture
def warm(served_box):
    """served_box with a warm process for its user cache (started by a first command, which ran in-process)."""
    stop_warm(served_box)
    shutil.rmtree(warm_folder(served_box), ignore_errors=True)  # the logs of the module's earlier tests
    proc = served_box.cli("status", str(served_box.spec_path), env=WARM)
    assert proc.returncode == 0, proc.stderr
    wait_serving(served_box)
    assert forked_runs(served_box) == [], "the first command ran in-process: nothing served it"
    yield served_box
    stop_warm(served_box)


def test_a_restart_in_the_warm_process_reports_as_one_without_it(warm):
    box = warm
    before = box.status()
    roles = {}
    for ctx, kind, env in ((16384, "warm", WARM), (32768, "cold", COLD)):
        rc, document = box.converge("--set", f"server.ctx={ctx}", env=env)
        assert rc == 0 and document["changed"], document
        assert document["release"] == before["release"] and not document["reverted"], document
        roles[kind] = [(role["name"], role["status"]) for role in document["roles"]]
    assert roles["warm"] == roles["cold"] and ("service", "changed") in roles["warm"]
    runs = forked_runs(box)
    assert len(runs) == 1 and "server.ctx=16384" in runs[0], runs  # the cold run was not forked
    after = box.status()
    assert after["healthy"] and after["release"] == before["release"]


def test_errors_and_exit_codes_are_the_same_in_the_warm_process(warm, tmp_path):
    box = warm
    broken = tmp_path / "broken.yaml"
    broken.write_text(box.spec_path.read_text().replace("ctx: 32768", "ctx: lots"))
    results = {}
    for name, env in (("warm", WARM), ("cold", COLD)):
        text = box.cli(str(broken), env=env)
        as_json = box.cli(str(broken), "--json", env=env)
        results[name] = (text.returncode, text.stdout, text.stderr, as_json.returncode,
                         report_document(as_json)["error"])
    assert results["warm"] == results["cold"]
    assert results["warm"][0] == 2 and "broken.yaml:" in results["warm"][2] and "server.ctx" in results["warm"][2]
    assert len(forked_runs(box)) == 2, "both warm commands were forked"


def test_the_forked_run_has_the_callers_environment_and_working_directory(served_box, tmp_path):
    """The warm process was started elsewhere, with another environment: each run has its caller's. (The
    installed script: `python -m` puts the working directory on the import path, so each folder would have
    a warm process of its own.)"""
    box, script = served_box, Path(sys.executable).parent / "ds4-converge"
    spec = yaml.safe_load(box.spec_path.read_text())
    spec["paths"]["root"] = "${DS4_TEST_WARM_ROOT}/root"
    spec["server"]["port"] = free_port()
    (tmp_path / "relative.yaml").write_text(yaml.safe_dump(spec))

    def run(*args, cwd: Path, **env) -> subprocess.CompletedProcess:
        return subprocess.run([str(script), *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                              env=env_of(box, **env))

    stop_warm(box)
    shutil.rmtree(warm_folder(box), ignore_errors=True)
    try:
        assert run("status", str(box.spec_path), cwd=box.root.parent, **WARM).returncode == 0
        wait_serving(box)
        for env in ({"DS4_TEST_WARM_ROOT": str(tmp_path)}, {}):
            warm_run = run("relative.yaml", "--check", cwd=tmp_path, **WARM, **env)
            cold_run = run("relative.yaml", "--check", cwd=tmp_path, **COLD, **env)
            assert warm_run.returncode == cold_run.returncode, (warm_run.stderr, cold_run.stderr)
            assert ("$DS4_TEST_WARM_ROOT is not set" in warm_run.stderr) == (not env), warm_run.stderr
            assert warm_run.returncode == (2 if not env else 0), warm_run.stderr
        assert [run.split(": ", 1)[1] for run in forked_runs(box)] == ["relative.yaml --check"] * 2
    finally:
        stop_warm(box)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_reaches_the_forked_run_and_it_reverts(warm, signum):
    box = warm
    before = box.status()
    with box.edited({"engine.ref": "v0.3.1-hang", "server.stop_wait_s": 10}):
        run = subprocess.Popen([sys.executable, "-m", "ds4_converge.cli", str(box.spec_path), "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env_of(box, **WARM))
        deadline = time.monotonic() + 30
        while box.status()["release"] == before["release"] and time.monotonic() < deadline:
            time.sleep(0.2)
        run.send_signal(signum)
        out, err = run.communicate(timeout=60)
    document = report_document(subprocess.CompletedProcess(run.args, run.returncode, out, err))
    assert run.returncode == 128 + signum, (document, err)
    assert document["reverted"] and document["aborted"] == "interrupted", document
    assert "Traceback" not in err
    assert len(forked_runs(box)) == 1, "the run was the warm process's child, not the caller"
    assert box.status()["release"] == before["release"]


def test_no_warm_process_unless_asked_or_from_a_terminal(box):
    for value in ("", "0"):  # auto without a terminal (a script, Ansible, CI), and off
        proc = box.cli("validate", str(box.spec_path), env={"DS4_CONVERGE_WARM": value})
        assert proc.returncode == 0, proc.stderr
    time.sleep(1)
    assert not warm_folder(box).exists() or not list(warm_folder(box).iterdir())


def test_an_idle_warm_process_leaves(box):
    proc = box.cli("validate", str(box.spec_path), env={**WARM, "DS4_CONVERGE_WARM_IDLE_S": "1"})
    assert proc.returncode == 0, proc.stderr
    wait_serving(box)
    deadline = time.monotonic() + 20
    while list(warm_folder(box).glob("*.pid")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not list(warm_folder(box).glob("*.pid"))
    assert "exiting: idle" in next(warm_folder(box).glob("*.log")).read_text()


def test_the_warm_process_imports_nothing_that_reads_the_environment_when_imported():
    """huggingface_hub fixes HF_HOME & co. at import; tempfile caches TMPDIR once asked: a forked run must read
    its caller's, so the warm process leaves them to the run."""
    code = ("import sys, tempfile; from ds4_converge.cli import warm_server; warm_server._preload(); "
            "print(sorted(m for m in ('huggingface_hub', 'requests', 'urllib3') if m in sys.modules), "
            "tempfile.tempdir, 'pydantic' in sys.modules, 'ds4_converge.orchestrate.reconciler' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["[]", "None", "True", "True"], proc.stderr


def test_a_killed_run_ends_its_caller_with_a_message(warm):
    """SIGKILL of the forked run (the OOM killer, a person): the caller says so and exits 1, no traceback."""
    box = warm
    caller = subprocess.Popen([sys.executable, "-m", "ds4_converge.cli", "bench", str(box.spec_path), "--reps", "50"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env_of(box, **WARM))
    deadline = time.monotonic() + 30
    while not forked_runs(box) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1)  # well into the bench (killed before it began, the caller would run the command itself)
    os.kill(int(forked_runs(box)[0].split(":")[0]), signal.SIGKILL)
    out, err = caller.communicate(timeout=30)
    assert caller.returncode == 1, (out, err)
    assert "ended without an exit status" in err and "Traceback" not in err, err
    assert box.status()["healthy"]


def test_from_a_terminal_a_warm_process_is_started(box):
    """DS4_CONVERGE_WARM unset (auto): a person at a terminal gets one for their next command."""
    import pty

    leader, terminal = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "ds4_converge.cli", "validate", str(box.spec_path)],
                              stdin=terminal, stdout=subprocess.PIPE, stderr=terminal, timeout=60,
                              env=env_of(box, DS4_CONVERGE_WARM=""))
        assert proc.returncode == 0
        wait_serving(box)
    finally:
        os.close(terminal)
        os.close(leader)
        stop_warm(box)
