"""A converged box is confirmed from the last no-op's receipt, with the real CLI, supervisord and engine: the same
report as the full no-op, nothing heavy imported; anything it relied on that changes takes the full path."""
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from boxes import MODEL, report_document

HEAVY = ("pydantic", "yaml", "ruamel", "rich", "jinja2", "supervisor", "http.client", "numpy", "requests")


def noop_twice(box) -> tuple[dict, dict]:
    """A full no-op (it writes the receipt), then one answered from it."""
    rc, full = box.converge("--refresh")
    assert rc == 0 and not full["changed"] and "from_receipt" not in full, [(r["name"], r["msg"]) for r in full["roles"]]
    rc, fast = box.converge()
    assert rc == 0, fast
    return full, fast


def test_the_receipt_answers_with_the_full_noops_report(served_box):
    full, fast = noop_twice(served_box)
    assert fast.pop("from_receipt")
    assert fast == full
    last_run = served_box.status()["last_run"]
    assert last_run["command"] == "converge" and last_run["ok"]


def test_the_receipt_path_imports_nothing_heavy(served_box):
    noop_twice(served_box)
    code = ("import sys; from ds4_converge.cli.main import main; code = main(sys.argv[1:]); "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m in {HEAVY!r}), file=sys.stderr)"
            "; sys.exit(code)")
    proc = subprocess.run([sys.executable, "-c", code, str(served_box.spec_path), "--json"], capture_output=True,
                          text=True, timeout=60,
                          env={**os.environ, "XDG_CACHE_HOME": str(served_box.user_cache)})
    document = report_document(proc)
    assert document.get("from_receipt"), document
    assert proc.stderr.strip().splitlines()[-1] == "[]"


def test_text_output_says_where_the_answer_came_from(served_box):
    noop_twice(served_box)
    full = served_box.cli(str(served_box.spec_path), "--refresh")
    proc = served_box.cli(str(served_box.spec_path))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split()[3] for line in lines if line[:2] == "20"] == \
        ["preflight", "toolchain", "models", "engine", "service", "probe"]
    assert "RECAP ok=6  changed=0" in proc.stdout
    assert lines[-1].startswith("(no-op checked against the receipt of the full run at ")
    # the same lines as the full run printed (a --json receipt serves text too), but for their time stamps
    assert [line[20:] for line in lines[:-1]] == [line[20:] for line in full.stdout.splitlines()]


def test_a_touched_model_file_takes_the_full_path(served_box, tmp_path):
    # a copy of its own: touching the repository's tiny model would restart the boxes of tests running beside
    # this one (another xdist worker's box saw its model change and restarted: the suite's flakes under -n 2)
    model = tmp_path / MODEL.name
    shutil.copyfile(MODEL, model)
    with served_box.edited({"model.main": str(model)}):
        assert served_box.converge()[0] == 0
        noop_twice(served_box)
        stat = os.stat(model)
        os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
        rc, document = served_box.converge()
        # the full path decides what a touched model means (the engine restarts on the file as it is now)
        assert rc == 0 and "from_receipt" not in document, document
    assert served_box.converge()[0] == 0  # settled again on the box's own model, for the next test


def test_other_arguments_take_the_full_path(served_box):
    noop_twice(served_box)
    rc, document = served_box.converge("--set", "health.interval_s=0.2")  # the same value: a no-op, planned
    assert rc == 0 and not document["changed"] and "from_receipt" not in document, document
    rc, document = served_box.converge("--check", "--diff")
    assert rc == 0 and "from_receipt" not in document, document


def test_a_plan_for_a_program_is_answered_from_the_receipt_and_is_no_run(served_box):
    """`--json --check` (the fleet role plans so before each host's turn): while the receipt holds, a converge
    would change nothing, and the plan says so from the receipt; it is a plan, so the last run stays the last run."""
    noop_twice(served_box)
    before = served_box.status()["last_run"]
    rc, document = served_box.converge("--check")
    assert rc == 0 and document["check"] is True and not document["changed"] and document["from_receipt"], document
    assert served_box.status()["last_run"] == before
    proc = served_box.cli(str(served_box.spec_path), "--check")  # text: the full plan prints a plan's lines
    assert proc.returncode == 0 and "no-op checked against the receipt" not in proc.stdout, proc.stdout


def test_a_changed_spec_is_planned_and_applied(served_box):
    noop_twice(served_box)
    with served_box.edited({"server.ctx": 65536}):
        rc, document = served_box.converge()
        assert rc == 0 and document["changed"] and "from_receipt" not in document, document
    rc, document = served_box.converge()
    assert rc == 0 and document["changed"], "back to the first ctx: a restart again, not the old receipt"


def test_an_engine_that_died_and_came_back_takes_the_full_path(served_box):
    noop_twice(served_box)
    pid = served_box.status()["pid"]
    os.kill(pid, signal.SIGKILL)  # the watchdog starts it again (health.watchdog.interval_s): another process
    deadline = time.monotonic() + 20
    while served_box.status()["pid"] in (pid, None) and time.monotonic() < deadline:
        time.sleep(0.2)
    rc, document = served_box.converge()
    assert rc == 0 and "from_receipt" not in document, document


def test_a_run_in_progress_takes_the_full_path_and_is_refused(served_box):
    noop_twice(served_box)
    with open(served_box.root / "converge.lock", "r+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        rc, document = served_box.converge()
    assert rc == 3 and document["aborted"] == "locked", document


def test_stale_host_facts_take_the_full_path(served_box):
    noop_twice(served_box)
    cache = served_box.user_cache / "ds4-converge" / "noop"
    (path,) = cache.glob("*.json")
    stored = json.loads(path.read_text())
    stored["facts_until"] = time.time() - 1
    path.write_text(json.dumps(stored))
    rc, document = served_box.converge()
    assert rc == 0 and "from_receipt" not in document, document
    rc, document = served_box.converge()
    assert document.get("from_receipt"), "the full run gathered the facts again and wrote a new receipt"


@pytest.mark.parametrize("variable", ["DS4C_CRASH_AT", "CUDA_HOME"])
def test_another_environment_takes_the_full_path(served_box, variable):
    noop_twice(served_box)
    rc, document = served_box.converge(env={variable: "nowhere-that-matters"})
    assert "from_receipt" not in document, document
