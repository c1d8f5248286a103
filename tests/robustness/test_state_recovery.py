"""A torn or corrupt state.json is reported, set aside and rebuilt from what is on disk (the program file
supervisord runs): every command still works, and the next converge ends healthy."""
import json
import os

import pytest


def _damage(box, how: str) -> None:
    state = box.root / "state.json"
    text = state.read_bytes()
    state.write_bytes({"torn": text[: len(text) // 2], "binary": b"\x00\xff\xfe garbage \x80",
                       "wrong shape": json.dumps({"current": {"release": 5}, "good": "x"}).encode(),
                       "empty": b""}[how])


@pytest.mark.parametrize("how", ["torn", "binary", "wrong shape", "empty"])
def test_a_damaged_state_is_rebuilt_and_the_next_converge_ends_healthy(box, how):
    rc, first = box.converge()
    assert rc == 0, first
    pid = box.status()["pid"]
    _damage(box, how)
    damaged = (box.root / "state.json").read_bytes()

    status = box.status()  # read-only commands work and change nothing
    assert status["healthy"] and status["release"] == first["release"] == status["last_good"], status
    check = box.cli(str(box.spec_path), "--check")
    assert check.returncode == 0 and "Traceback" not in check.stderr, check.stderr
    assert (box.root / "state.json").read_bytes() == damaged, "check mode sets nothing aside"

    rc, document = box.converge()
    assert rc == 0 and document["ok"], document
    preflight = document["roles"][0]
    assert any(w.startswith(f"state: {box.root}/state.json cannot be read") and "rebuilt from disk" in w
               for w in preflight["warnings"]), preflight
    # if not: the report says whether a role restarted it; supervisord's log whether it died on its own
    assert box.status()["pid"] == pid, ("the engine that was serving is kept, not restarted", document,
                                        (box.root / "logs" / "supervisord.log").read_text()[-3000:])
    saved = json.loads((box.root / "state.json").read_text())
    assert saved["current"]["release"] == first["release"] and saved["good"][-1]["release"] == first["release"]
    [aside] = list(box.root.glob("state.json.damaged-*"))
    assert aside.read_bytes() == damaged

    rc, again = box.converge()
    assert rc == 0 and not again["changed"] and not any("state:" in w for w in again["roles"][0]["warnings"])


def test_a_failed_switch_after_the_state_was_lost_reverts_to_what_was_serving(box):
    rc, first = box.converge()
    assert rc == 0, first
    _damage(box, "torn")
    box.spec["engine"]["ref"] = "v0.3.1-crash-at-start"
    box.write()
    rc, document = box.converge()
    assert rc == 1 and document["reverted"], document
    assert f"reverted to {first['release']}" in document["error"]
    status = box.status()
    assert status["healthy"] and status["release"] == first["release"]


def _plant(state, how: str) -> None:
    """Damage of the kinds no write of ours makes: read without bounds, each would hang or exhaust memory."""
    state.unlink()
    if how == "link to /dev/zero":
        state.symlink_to("/dev/zero")
    elif how == "dangling link":
        state.symlink_to(state.parent / "nowhere")
    elif how == "fifo":
        os.mkfifo(state)
    elif how == "folder":
        state.mkdir()
    elif how == "deep nesting":
        state.write_bytes(b"[" * 100_000)
    elif how == "too large":
        state.write_bytes(b" " * (2 << 20) + b"{}")
    elif how == "empty document":
        state.write_bytes(b"{}")


@pytest.mark.parametrize("how", ["link to /dev/zero", "dangling link", "fifo", "folder", "deep nesting",
                                 "too large", "empty document"])
def test_damaged_state_of_every_kind_is_read_with_bounds_set_aside_and_rebuilt(served_box, how):
    box = served_box
    release = box.status()["release"]
    _plant(box.root / "state.json", how)
    status = box.cli("status", str(box.spec_path), "--json", timeout=30)  # bounded: no hang, no memory growth
    assert status.returncode == 0 and "Traceback" not in status.stderr, (status.stdout, status.stderr)
    assert json.loads(status.stdout)["release"] == release, "what runs is told from disk, never 'RUNNING' as an error"
    proc = box.cli(str(box.spec_path), "--json", timeout=120)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    document = json.loads(proc.stdout)
    assert any("state:" in w and "rebuilt from disk" in w for w in document["roles"][0]["warnings"]), document
    assert (box.root / "state.json").is_file() and not (box.root / "state.json").is_symlink()
    assert json.loads((box.root / "state.json").read_text())["current"]["release"] == release
    assert box.status()["healthy"]
    for aside in box.root.glob("state.json.damaged-*"):  # the next kind starts from a clean root
        aside.rmdir() if aside.is_dir() and not aside.is_symlink() else aside.unlink()
