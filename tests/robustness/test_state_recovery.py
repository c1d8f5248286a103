"""A torn or corrupt state.json is reported, set aside and rebuilt from what is on disk (the program file
supervisord runs): every command still works, and the next converge ends healthy."""
import json

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
    assert box.status()["pid"] == pid, "the engine that was serving is kept, not restarted"
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
