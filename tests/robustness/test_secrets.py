"""A secret in server.env (HF_TOKEN …) reaches the engine, but sits in no file another user can read, not on the
engine's command line, and in none of the tool's own records (state.json, the render cache): a revert and the
switch guard still put it back."""
import json
import os
import stat
from pathlib import Path

from ds4_converge.service.secrets import placeholder

TOKEN = "hf_NeverInAReadableFile0123%x"


def _readable_by_others(path: Path) -> bool:
    """The file, or a folder on its way from the root, lets a user other than its owner read it."""
    if path.stat().st_mode & 0o044:
        parent = path.parent
        while True:
            if not parent.stat().st_mode & 0o011:  # a folder others cannot enter hides what is in it
                return False
            if parent == parent.parent or parent.name == "root":
                return True
            parent = parent.parent
    return False


def _holders(root: Path) -> dict[str, bool]:
    return {str(p.relative_to(root)): _readable_by_others(p) for p in root.rglob("*")
            if p.is_file() and not p.is_symlink() and TOKEN.encode() in p.read_bytes()}


def _engine_has_the_token(box) -> bool:
    pid = box.status()["pid"]
    assert TOKEN.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes(), "not on the command line (ps)"
    return f"HF_TOKEN={TOKEN}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")


def test_a_secret_reaches_the_engine_and_no_file_others_can_read(box):
    box.spec["server"]["env"]["HF_TOKEN"] = TOKEN
    box.write()
    rc, document = box.converge()
    assert rc == 0, document
    assert _engine_has_the_token(box)
    holders = _holders(box.root)
    assert set(holders) <= {"supervisor/programs/ds4.conf", "run/secrets.json"}, holders
    assert not any(holders.values()), holders
    assert stat.S_IMODE((box.root / "supervisor/programs/ds4.conf").stat().st_mode) == 0o600
    state = json.loads((box.root / "state.json").read_text())
    assert placeholder(TOKEN) in state["current"]["program_conf"], "state keeps a digest, not the value"
    rc, again = box.converge()
    assert rc == 0 and not again["changed"], again  # the sealed record matches the unsealed file

    box.spec["engine"]["ref"] = "v0.3.1-crash-at-start"  # a failed switch: the revert writes last good back
    box.write()
    rc, document = box.converge()
    assert rc == 1 and document["reverted"], document
    assert _engine_has_the_token(box)
    assert not any(_holders(box.root).values())
    assert TOKEN not in (box.root / "cache" / "rendered.json").read_text()
