"""Every exit path of every command prints one JSON document with --json, valid against report.schema.json,
and people get the same facts in words: what serves, what a restart changes, when there is nothing yet."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from boxes import report_document


# --------------------------------------------------------------------------------- never converged here


def test_a_root_never_converged_is_said_so_by_status_logs_rollback_and_stop(box):
    rc, status = box.json("status", str(box.spec_path))
    assert rc == 4 and status["never_converged"] and status["release"] is None and not status["ok"], status
    text = box.cli("status", str(box.spec_path))
    assert text.returncode == 4 and "never converged" in text.stdout
    assert "None" not in text.stdout and "True" not in text.stdout

    rc, logs = box.json("logs", str(box.spec_path))
    assert rc == 4 and logs["aborted"] == "never_converged", logs
    text = box.cli("logs", str(box.spec_path))
    assert text.returncode == 4 and "no logs yet" in text.stderr and "==>" not in text.stdout

    rc, rollback = box.json("rollback", str(box.spec_path))
    assert rc == 4 and rollback["aborted"] == "never_converged" and "never converged" in rollback["error"]

    rc, stop = box.json("stop", str(box.spec_path))
    assert rc == 0 and not stop["stopped"], stop
    assert not box.root.exists(), "asking must not create the root"


# ------------------------------------------------------------------------------------------ bad input


def test_an_invalid_spec_reports_file_line_column_and_field(box):
    box.spec_path.write_text(box.spec_path.read_text().replace("ctx: 32768", "ctx: lots"))
    rc, document = box.json(str(box.spec_path))
    assert rc == 2 and document["aborted"] == "invalid", document
    [problem] = document["problems"]
    line = next(i for i, text in enumerate(box.spec_path.read_text().splitlines(), 1) if "ctx: lots" in text)
    assert (problem["file"], problem["line"], problem["field"]) == (str(box.spec_path), line, "server.ctx")
    assert problem["column"] > 1 and f"{box.spec_path}:{line}:" in document["error"]
    assert not box.root.exists()


def test_a_bad_override_and_a_bad_flag_are_documents_too(box):
    rc, document = box.json(str(box.spec_path), "--set", "server.port=http")
    assert rc == 2 and document["problems"][0]["override"] == "server.port=http", document
    rc, document = box.json(str(box.spec_path), "--no-such-flag")
    assert rc == 2 and document["aborted"] == "usage" and "--no-such-flag" in document["error"], document
    rc, document = box.json("logs", str(box.spec_path), "--follow")
    assert rc == 2 and document["aborted"] == "usage", document


def test_a_held_lock_names_its_holder_in_the_document(box):
    first = box.converge_holding_the_lock()
    rc, document = box.json(str(box.spec_path))
    assert rc == 3 and document["aborted"] == "locked" and document["holder_pid"] == first.pid, document
    assert first.wait(timeout=120) == 0


# -------------------------------------------------------------------------------- what serves, in words


def test_status_exit_codes_and_table_follow_what_serves(box):
    rc, converged = box.converge()
    assert rc == 0, converged
    rc, status = box.json("status", str(box.spec_path))
    assert rc == 0 and status["healthy"] and status["release"] == converged["release"], status
    text = box.cli("status", str(box.spec_path)).stdout
    assert "healthy" in text and converged["release"] in text and "last run" in text
    assert not any(word in text for word in ("None", "True", "False"))

    box.stop()
    rc, status = box.json("status", str(box.spec_path))
    assert rc == 1 and not status["healthy"] and not status["never_converged"], status
    assert status["release"] is None and status["last_good"] == converged["release"], "release: what serves now"
    assert status["stopped"] and "stopped on purpose by `ds4-converge stop`" in status["error"], status
    assert f" {box.spec_path}" in status["error"], "and the command that starts it again"
    text = box.cli("status", str(box.spec_path))
    assert text.returncode == 1 and "ds4: stopped on purpose" in text.stdout and "None" not in text.stdout, text

    rc, converged = box.converge()  # started again: no longer "stopped"
    assert rc == 0, converged
    assert box.json("status", str(box.spec_path))[1]["stopped"] is False


def test_a_restart_and_a_rollback_say_what_they_change(box):
    assert box.converge()[0] == 0
    proc = box.cli(str(box.spec_path), "--set", "server.ctx=65536", "--check")
    assert proc.returncode == 0 and "would change: ctx 32768 → 65536" in proc.stdout, proc.stdout
    rc, document = box.converge("--set", "server.ctx=65536")
    assert rc == 0 and document["switch"]["changes"] == ["ctx 32768 → 65536"], document
    box.spec["server"]["ctx"] = 65536
    box.write()

    proc = box.cli("rollback", str(box.spec_path))
    assert proc.returncode == 0, proc.stderr
    assert "ctx 65536 → 32768" in proc.stdout and "rolled back" in proc.stdout, proc.stdout
    rc, status = box.json("status", str(box.spec_path))
    assert rc == 0 and status["last_run"]["command"] == "rollback"


def test_check_mode_on_a_new_root_says_first_start_as_the_run_does(box):
    rc, planned = box.converge("--check")
    assert rc == 0 and planned["switch"]["from"] is None, planned
    assert planned["switch"]["changes"][0] == f"first start: release {planned['switch']['to']}", planned
    service = next(r for r in planned["roles"] if r["name"] == "service")
    assert service["msg"] == "would start ds4 (first start)" and not any("restart" in c for c in service["changes"]), service
    rc, ran = box.converge()
    assert rc == 0 and ran["switch"]["changes"] == planned["switch"]["changes"][:1], ran
    assert "started ds4 on release" in next(r for r in ran["roles"] if r["name"] == "service")["msg"], ran


def test_check_mode_reports_what_serves_now_not_what_would(box):
    rc, first = box.converge()
    assert rc == 0
    rc, planned = box.converge("--check", "--set", "engine.ref=v0.3.0")
    assert rc == 0 and planned["check"] and planned["changed"], planned
    assert planned["release"] == first["release"], "release is what serves now, in check mode too"
    assert planned["switch"]["from"] == first["release"] and planned["switch"]["to"] != first["release"]


def test_logs_show_a_failed_build_only_until_a_later_run_succeeds(box):
    assert box.converge()[0] == 0
    rc, failed = box.converge("--set", "engine.ref=v0.3.1-build-fails")
    assert rc == 1 and not failed["reverted"], failed
    rc, logs = box.json("logs", str(box.spec_path))
    assert rc == 0 and logs["build_log"] and "build-" in logs["build_log"]["path"], logs
    assert "(failed build" in box.cli("logs", str(box.spec_path)).stdout
    box.stop()  # a stop ends well too, but builds nothing: the failed build is still the news
    assert box.json("logs", str(box.spec_path))[1]["build_log"], "shown after a stop"

    assert box.converge()[0] == 0  # back on the good spec: nothing to build, the run ends well
    rc, logs = box.json("logs", str(box.spec_path))
    assert rc == 0 and logs["build_log"] is None and "ds4-server" in logs["engine_log"]["text"], logs
    assert "failed build" not in box.cli("logs", str(box.spec_path)).stdout


# ----------------------------------------------------------------------------- progress while it runs


def test_role_lines_arrive_as_roles_finish_and_long_waits_show_progress(box):
    """Without a terminal (journald, Ansible): timestamped lines, each role's as soon as it is done, and a
    line every --progress-interval seconds of a wait with the elapsed time and the engine's last log line."""
    box.spec["server"]["env"]["DS4_SIM_LOAD_SECONDS"] = "2"
    box.spec["health"]["soak_s"] = 3
    box.write()
    run = subprocess.Popen([sys.executable, "-m", "ds4_converge.cli", str(box.spec_path), "--progress-interval",
                            "0.5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    arrivals = {}
    for line in run.stdout:
        words = line.split()
        if len(words) > 3 and words[2] in ("ok", "changed", "failed"):
            arrivals[words[3]] = time.monotonic()
    finished = time.monotonic()
    err = run.stderr.read()
    assert run.wait(timeout=60) == 0, err
    assert list(arrivals) == ["preflight", "toolchain", "models", "engine", "service", "probe"]
    assert finished - arrivals["service"] >= 4, "the service line came before the load and the soak, not at the end"
    waits = [line for line in err.splitlines() if line.startswith("20") and "probing" in line and " · " in line]
    assert waits, err
    assert any("ds4.log: " in line for line in waits), "the engine's own last line shows while it loads"


@pytest.mark.parametrize("command", ["validate", "stop"])
def test_simple_commands_print_documents(box, command):
    rc, document = box.json(command, str(box.spec_path))
    assert rc == 0 and document["ok"] and document["command"] == command, document


def test_on_a_terminal_a_live_line_shows_the_wait_and_the_role_lines_stay(box):
    """Under a pseudo-terminal (what a person sees): the live line names the wait and its elapsed time, and
    goes away; the role lines and the recap stay."""
    import os
    import pty

    box.spec["server"]["env"]["DS4_SIM_LOAD_SECONDS"] = "2"
    box.write()
    main, secondary = pty.openpty()
    run = subprocess.Popen([sys.executable, "-m", "ds4_converge.cli", str(box.spec_path)], stdin=subprocess.DEVNULL,
                           stdout=secondary, stderr=secondary, env={**os.environ, "TERM": "xterm", "COLUMNS": "160"})
    os.close(secondary)
    screen = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        screen += chunk
    os.close(main)
    assert run.wait(timeout=120) == 0, screen.decode(errors="replace")
    text = screen.decode(errors="replace")
    assert "probing" in text and " · " in text and "ds4.log: " in text, text
    for role in ("preflight", "engine", "service", "probe"):
        assert role in text
    assert "converged" in text and "curl -s" in text


def test_stop_works_after_the_service_user_was_deleted(box):
    """server.user names a user this host no longer has: converge refuses the spec (exit 2), stop still stops."""
    rc, document = box.converge()
    assert rc == 0, document
    gone = ["--set", "server.user=ds4c-deleted-user"]
    rc, refused = box.converge(*gone)
    assert rc == 2 and "no user 'ds4c-deleted-user' on this host" in refused["error"], refused
    rc, stop = box.json("stop", str(box.spec_path), *gone)
    assert rc == 0 and stop["stopped"], stop
    assert box.status()["pid"] is None
    # a root that lives in that user's home cannot be found without the user: said plainly, still exit 2
    rc, lost = box.json("stop", str(box.spec_path), *gone, "--set", "paths.root=~/ds4")
    assert rc == 2 and "names the home of server.user 'ds4c-deleted-user'" in lost["error"], lost
