"""Converge one box for real: from scratch, no-op, changes, upgrades, check mode, locks."""
from pathlib import Path

import requests

from boxes import REPO, engine_pids, report_document


def test_converge_from_scratch_then_noop(box):
    rc, first = box.converge()
    assert rc == 0, first
    assert first["ok"] and first["changed"] and not first["reverted"]
    assert first["endpoint"] == box.endpoint
    assert {r["name"]: r["status"] for r in first["roles"]}["engine"] == "changed"
    models = requests.get(f"{box.endpoint}/v1/models", timeout=5).json()
    assert models["data"][0]["id"] == "deepseek-v4-flash"
    status = box.status()
    assert status["healthy"] and status["release"] == first["release"] == status["last_good"]
    pid = status["pid"]
    assert (box.root / "run").stat().st_mode & 0o777 == 0o700, "the supervisor socket's dir is private"
    assert (box.root / "run" / "supervisor.sock").is_socket()
    lock = box.root / "locks" / "ds4.ds4.lock"  # DS4_LOCK_FILE: the engine flock()s it and writes its pid
    assert lock.read_text() == f"{pid}\n" and lock.stat().st_mode & 0o777 == 0o600

    rc, second = box.converge()
    assert rc == 0 and second["ok"] and not second["changed"], second
    assert all(r["status"] == "ok" for r in second["roles"])
    assert box.status()["pid"] == pid
    service = next(r for r in second["roles"] if r["name"] == "service")
    assert f"(pid {pid}), config unchanged" in service["msg"]


def test_ctx_change_restarts_and_stays_healthy(box):
    assert box.converge()[0] == 0
    old_pid = box.status()["pid"]
    rc, document = box.converge("--set", "server.ctx=65536")
    assert rc == 0 and document["changed"], document
    status = box.status()
    assert status["healthy"] and status["pid"] != old_pid
    assert requests.get(f"{box.endpoint}/v1/models", timeout=5).json()["data"][0]["context_length"] == 65536
    engine = next(r for r in document["roles"] if r["name"] == "engine")
    assert engine["status"] == "ok", "a ctx change must not rebuild"


def _upgraded(box) -> tuple[dict, dict]:
    """Converged on v0.2.0, then on v0.3.0: both reports (each run exited 0)."""
    rc, old = box.converge()
    assert rc == 0, old
    box.spec["engine"]["ref"] = "v0.3.0"
    box.write()
    rc, new = box.converge()
    assert rc == 0, new
    return old, new


def test_upgrade_builds_a_new_release_and_keeps_the_old(box):
    old, new = _upgraded(box)
    assert new["release"] != old["release"], new
    releases = {p.name for p in (box.root / "releases").iterdir()}
    assert {old["release"], new["release"]} <= releases
    assert box.status()["last_good"] == new["release"]


def test_check_mode_changes_nothing(box):
    assert box.converge()[0] == 0
    before_tree, before_pids = box.tree(), engine_pids(box.root)
    box.spec["engine"]["ref"] = "v0.3.0"
    box.spec["server"]["ctx"] = 65536
    box.write()
    proc = box.cli(str(box.spec_path), "--check", "--diff")
    assert proc.returncode == 0, proc.stderr
    assert "would build" in proc.stdout and "check mode" in proc.stdout
    assert box.tree() == before_tree
    assert engine_pids(box.root) == before_pids

    box.spec["engine"]["ref"] = "v0.2.0"  # built already: the diff shows the exact command line change
    box.write()
    proc = box.cli(str(box.spec_path), "--check", "--diff")
    assert "-c 32768" in proc.stdout and "+command=" in proc.stdout and "65536" in proc.stdout
    assert box.tree() == before_tree and engine_pids(box.root) == before_pids


def test_check_mode_on_a_fresh_box_creates_nothing(box):
    proc = box.cli(str(box.spec_path), "--check", "--json")
    document = report_document(proc)
    assert proc.returncode == 0 and document["changed"], document
    assert not box.root.exists()


def test_invalid_spec_exits_2_with_position_and_touches_nothing(box):
    box.spec_path.write_text(box.spec_path.read_text() + "bogus_section: 1\n")
    proc = box.cli(str(box.spec_path))
    assert proc.returncode == 2
    assert f"{box.spec_path}:" in proc.stderr and "bogus_section: unknown key" in proc.stderr
    assert not box.root.exists()


def test_a_concurrent_run_exits_3_naming_the_holder(box):
    first = box.converge_holding_the_lock()
    second = box.cli(str(box.spec_path))
    assert second.returncode == 3
    assert f"pid {first.pid}" in second.stderr
    assert first.wait(timeout=120) == 0


def test_rollback_goes_back_to_the_previous_good_release(box):
    old, _ = _upgraded(box)
    proc = box.cli("rollback", str(box.spec_path), "--json")
    document = report_document(proc)
    assert proc.returncode == 0 and document["release"] == old["release"], document
    status = box.status()
    assert status["healthy"] and status["release"] == old["release"] == status["last_good"]


def test_old_releases_are_pruned_but_never_current_or_last_good(box):
    box.spec["engine"]["keep_releases"] = 1
    ids = []
    for ref in ("v0.2.0", "v0.3.0", "v0.1.0"):
        box.spec["engine"]["ref"] = ref
        box.write()
        rc, document = box.converge()
        assert rc == 0, document
        ids.append(document["release"])
    left = {p.name for p in (box.root / "releases").iterdir()}
    assert left == {ids[1], ids[2]}, "the newest and the rollback target stay; the oldest goes"


def test_the_engine_environment_is_the_spec_not_the_callers_shell(box):
    rc, document = box.converge(env={"HF_TOKEN": "hf_secret_do_not_leak", "CUDA_VISIBLE_DEVICES": "7"})
    assert rc == 0, document
    environ = (Path(f"/proc/{box.status()['pid']}/environ")).read_bytes().split(b"\0")
    assert not any(e.startswith((b"HF_TOKEN=", b"CUDA_VISIBLE_DEVICES=")) for e in environ)
    assert b"DS4_SIM_LOAD_SECONDS=0.3" in environ and any(e.startswith(b"DS4_LOCK_FILE=") for e in environ)
    assert "hf_secret_do_not_leak" not in "".join(p.read_text(errors="replace") for p in box.root.rglob("*")
                                                   if p.is_file() and p.suffix in (".conf", ".json", ".log"))


def test_renaming_the_program_replaces_the_old_one(box):
    assert box.converge()[0] == 0
    old_pid = box.status()["pid"]
    rc, document = box.converge("--set", "server.name=ds4b")
    assert rc == 0, document
    assert not (box.root / "supervisor/programs/ds4.conf").exists()
    status = box.json("status", str(box.spec_path), "--set", "server.name=ds4b")[1]
    assert status["healthy"] and status["pid"] != old_pid
    assert engine_pids(box.root) == {status["pid"]}
    box.cli("stop", str(box.spec_path), "--set", "server.name=ds4b")


def test_the_version_is_what_the_installer_really_pins(box, tmp_path):
    """The installer is fetched over HTTP like the real one; its DS4_REF default is the pin, whatever it says
    in its comments or README."""
    import http.server
    import threading

    install_sh = (REPO / "engine/sim/install.sh").read_text().replace(
        'DS4_REF="${DS4_REF:-v0.2.0}"', '# README: v0.1.0\nDS4_REF="${DS4_REF:-v0.3.0}"')
    (tmp_path / "install.sh").write_text(install_sh)
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        del box.spec["engine"]["ref"]
        box.spec["engine"]["installer"] = f"http://127.0.0.1:{server.server_address[1]}/install.sh"
        box.write()
        rc, document = box.converge()
    finally:
        server.shutdown()
    assert rc == 0, document
    engine = next(r for r in document["roles"] if r["name"] == "engine")
    assert "(v0.3.0)" in engine["msg"], engine
