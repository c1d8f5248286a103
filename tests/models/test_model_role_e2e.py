"""The models role through the real CLI: downloads from a loopback server, resume, verification, identity,
memory budget, free space. The simulated engine loads the synthetic main model."""
import hashlib

import pytest

from boxes import MODEL, tmpfs


def serve_model(file_server, data: bytes, name="tiny-ds4flash.gguf") -> str:
    file_server.files[f"/models/{name}"] = data
    return file_server.url(f"/models/{name}")


def test_download_verify_and_noop(box, file_server):
    data = MODEL.read_bytes()
    url = serve_model(file_server, data)
    box.spec["model"]["main"] = {"source": url, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    box.write()
    rc, document = box.converge()
    assert rc == 0, document
    dest = box.root / "models" / "tiny-ds4flash.gguf"
    assert dest.read_bytes() == data
    assert f"-m {dest}" in (box.root / "supervisor/programs/ds4.conf").read_text()
    served = len(file_server.requests)
    rc, again = box.converge()
    assert rc == 0 and not again["changed"], again
    assert len(file_server.requests) == served, "a converged box must not download again"
    models = next(r for r in again["roles"] if r["name"] == "models")
    assert "sha256 verified (cached)" in models["msg"]


def test_a_cut_download_resumes_on_the_next_run(box, file_server):
    data = MODEL.read_bytes() + bytes(3 << 20)  # tensor data the engine maps but the header does not describe
    url = serve_model(file_server, data)
    box.spec["model"]["main"] = {"source": url, "sha256": hashlib.sha256(data).hexdigest()}
    box.write()
    file_server.cut_after = len(data) // 2
    rc, first = box.converge()
    assert rc == 1 and "interrupted" in first["error"], first
    partial = box.root / "models" / "tiny-ds4flash.gguf.partial"
    assert partial.exists() and not (box.root / "models" / "tiny-ds4flash.gguf").exists()
    assert box.status()["pid"] is None, "nothing may start on a partial file"
    first_partial_size = partial.stat().st_size
    rc, second = box.converge()
    assert rc == 0, second
    kept = int(first_partial_size)
    resumed = file_server.requests[-1]
    assert kept > 0 and resumed.headers.get("Range") == f"bytes={kept}-", resumed
    assert resumed.sent == len(data) - kept, "only the missing bytes are transferred"
    assert (box.root / "models" / "tiny-ds4flash.gguf").read_bytes() == data


def test_corrupted_bytes_are_refused_and_the_old_model_keeps_serving(served_box, file_server):
    box = served_box
    before = box.status()
    data = MODEL.read_bytes()
    url = serve_model(file_server, data, name="new-model.gguf")
    file_server.corrupt_at = len(data) // 3
    with box.edited({"model.main": {"source": url, "sha256": hashlib.sha256(data).hexdigest()}}):
        rc, document = box.converge()
    assert rc == 1 and "sha256" in document["error"] and "not used" in document["error"], document
    assert not (box.root / "models" / "new-model.gguf").exists()
    after = box.status()
    assert (after["pid"], after["release"], after["healthy"]) == (before["pid"], before["release"], True)


def test_an_mtp_file_as_main_model_is_refused_before_anything_changes(box, tmp_path):
    mtp = MODEL.parent / "tiny-mtp.gguf"
    box.spec["model"]["main"] = str(mtp)
    box.write()
    rc, document = box.converge()
    assert rc == 1 and "is an MTP draft head, not the main model" in document["error"], document
    assert not (box.root / "releases").exists() and box.status()["pid"] is None


def test_a_0731_base_with_the_legacy_mtp_is_refused(box):
    box.spec["model"] = {"main": str(MODEL.parent / "tiny-ds4flash-0731.gguf"), "mtp": str(MODEL.parent / "tiny-mtp.gguf")}
    box.spec["server"]["speculative"] = {"mode": "mtp"}
    box.write()
    rc, document = box.converge()
    assert rc == 1 and "0731" in document["error"] and "MTP" in document["error"], document


def test_a_context_that_cannot_fit_is_refused_with_numbers(box):
    rc, document = box.converge("--set", "server.ctx=16000000")  # within the schema (2**24), past any memory
    assert rc == 1, document
    assert "does not fit" in document["error"] and "GiB" in document["error"] and "ctx 16000000" in document["error"]
    assert not (box.root / "releases").exists()


def test_with_memory_budget_warn_a_model_that_cannot_fit_is_reported_loudly_and_the_run_goes_on(box):
    rc, document = box.converge("--set", "server.ctx=16000000", "--set", "model.memory_budget=warn")
    assert rc == 0 and document["ok"], document
    models = next(r for r in document["roles"] if r["name"] == "models")
    (warning,) = [w for w in models["warnings"] if "does not fit" in w]
    assert "ctx 16000000" in warning and "model.memory_budget is warn, so the run goes on" in warning
    engine = next(r for r in document["roles"] if r["name"] == "engine")
    assert not any("--ssd-streaming" in w for w in engine["warnings"])  # the simulated build has no such flag
    assert box.status()["pid"] is not None
    text = box.cli(str(box.spec_path), "--set", "server.ctx=16000000", "--set", "model.memory_budget=warn")
    assert text.returncode == 0 and "does not fit" in text.stdout + text.stderr, text.stdout


def test_check_mode_shows_the_memory_budget(box):
    proc = box.cli(str(box.spec_path), "--check")
    assert proc.returncode == 0 and "memory budget fits" in proc.stdout, proc.stdout


def test_check_mode_counts_model_files_not_changes(box, file_server):
    """One download is one file, although the plan also lists the identity check that follows it."""
    box.spec["model"]["main"] = {"source": serve_model(file_server, MODEL.read_bytes())}
    box.write()
    rc, document = box.converge("--check")
    assert rc == 0, document
    models = next(r for r in document["roles"] if r["name"] == "models")
    assert models["msg"] == "would download 1 model file and check it", models
    assert len(models["changes"]) == 2 and models["changes"][0].startswith("download model.main "), models


def test_no_space_gives_the_numbers_and_downloads_nothing(box, file_server, tmp_path):
    url = serve_model(file_server, MODEL.read_bytes())
    with tmpfs(tmp_path / "tiny", "64k") as tiny_disk:
        box.inside = tiny_disk.inside
        box.spec["model"]["main"] = {"source": url, "dest": str(tiny_disk.path)}
        box.write()
        rc, document = box.converge()
        assert rc == 1 and "not enough free space" in document["error"] and "free" in document["error"], document
        assert tiny_disk.entries() == [], "not even a partial file"
        assert box.status()["pid"] is None


def test_remove_unused_deletes_only_files_no_release_uses(box, file_server):
    data = MODEL.read_bytes()
    box.spec["model"]["main"] = {"source": serve_model(file_server, data)}
    box.write()
    assert box.converge()[0] == 0
    models = box.root / "models"
    stale = models / "old-quant.gguf"
    stale.write_bytes(b"GGUF old")
    box.spec["model"]["remove_unused"] = True
    box.write()
    rc, document = box.converge()
    assert rc == 0, document
    assert not stale.exists()
    assert (models / "tiny-ds4flash.gguf").exists(), "the serving model stays"
    assert box.status()["healthy"]


def test_a_dest_that_names_the_file_is_that_file_and_claims_nothing_around_it(box, file_server, tmp_path):
    """`dest: DIR/name.gguf` downloads to exactly that path (not DIR/name.gguf/SOURCE-NAME), and remove_unused
    leaves the other files of that folder alone: the spec claimed the file, not the folder."""
    data = MODEL.read_bytes()
    folder = tmp_path / "gguf"
    folder.mkdir()
    neighbour = folder / "someone-elses.gguf"
    neighbour.write_bytes(b"GGUF not ours")
    dest = folder / "q2.gguf"
    box.spec["model"] = {"main": {"source": serve_model(file_server, data), "dest": str(dest)}, "remove_unused": True}
    box.write()
    rc, document = box.converge()
    assert rc == 0, document
    assert dest.is_file() and dest.read_bytes() == data
    assert f"-m {dest} " in (box.root / "supervisor/programs/ds4.conf").read_text()
    assert neighbour.read_bytes() == b"GGUF not ours"


def test_hf_source_through_the_cli_never_shows_the_token(box, file_server):
    """hf:// goes to HF_ENDPOINT (a loopback Hub here) with the token from HF_TOKEN; the token reaches the Hub
    and nothing else: not the output, the logs, the state or the rendered configs."""
    token = "hf_loopbackSECRET123"
    data = MODEL.read_bytes()
    file_server.files["/acme/ds4-gguf/resolve/main/tiny-ds4flash.gguf"] = data
    file_server.required_auth = f"Bearer {token}"
    box.spec["model"]["main"] = {"source": "hf://acme/ds4-gguf/tiny-ds4flash.gguf",
                                 "sha256": hashlib.sha256(data).hexdigest()}
    box.write()
    proc = box.cli(str(box.spec_path), "--json", env={"HF_ENDPOINT": file_server.base_url, "HF_TOKEN": token})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (box.root / "models" / "tiny-ds4flash.gguf").read_bytes() == data
    assert file_server.requests[-1].headers.get("Authorization") == f"Bearer {token}"
    assert token not in proc.stdout + proc.stderr
    for path in box.root.rglob("*"):
        if path.is_file() and path.suffix in (".conf", ".json", ".log", ".yaml"):
            assert token not in path.read_text(errors="replace"), path

    file_server.required_auth = "Bearer another"  # a wrong token: the error says so without printing it
    (box.root / "models" / "tiny-ds4flash.gguf").unlink()
    proc = box.cli(str(box.spec_path), "--json", env={"HF_ENDPOINT": file_server.base_url, "HF_TOKEN": token})
    assert proc.returncode == 1 and "401" in proc.stdout and token not in proc.stdout + proc.stderr


def test_a_model_change_restarts_through_the_probe(served_box, tmp_path):
    box = served_box
    before = box.status()
    other = tmp_path / "other-quant.gguf"
    other.write_bytes(MODEL.read_bytes())
    with box.edited({"model.main": str(other)}):
        rc, document = box.converge()
        after = box.status()
        conf = (box.root / "supervisor/programs/ds4.conf").read_text()
        assert rc == 0, document
        assert after["healthy"] and after["pid"] != before["pid"] and f"-m {other}" in conf
        other.write_bytes(MODEL.read_bytes())  # new bytes under the same name: a new model, so a restart
        rc, again = box.converge()
        assert rc == 0 and again["changed"] and box.status()["pid"] != after["pid"], again
    assert box.converge()[0] == 0  # back to the box's own model


def test_a_local_model_that_does_not_exist_is_named_so(box, tmp_path):
    """Not "missing; the file was not used": there is no file to use, and nothing to fetch it from."""
    box.spec["model"]["main"] = str(tmp_path / "nowhere" / "model.gguf")
    box.write()
    rc, document = box.converge("--check")
    assert rc == 1, document
    assert f"model.main: {tmp_path}/nowhere/model.gguf does not exist, and the spec gives no source to download it " \
           "from (fix: put the file there, or give one: model.main: {source: hf://" in document["error"], document["error"]
    assert "not used" not in document["error"]


@pytest.mark.parametrize("kind", ["a FIFO", "a character device"])
def test_a_dest_that_is_a_special_file_is_refused_at_check_naming_it(box, file_server, tmp_path, kind):
    """Not a raw `[Errno 17] File exists` from the apply: --check already says what is in the way."""
    import os

    dest = tmp_path / "q2.gguf"
    if kind == "a FIFO":
        os.mkfifo(dest)
    else:
        os.symlink("/dev/null", dest)
    box.spec["model"]["main"] = {"source": serve_model(file_server, MODEL.read_bytes()), "dest": str(dest)}
    box.write()
    for args in (["--check"], []):
        rc, document = box.converge(*args)
        assert rc == 1, document
        models = next(r for r in document["roles"] if r["name"] == "models")
        assert models["msg"] == (f"model.main.dest: {dest} is {kind}: a download cannot put the model there; "
                                 f"remove it or name another dest"), models
    assert not file_server.requests


@pytest.mark.parametrize("path,kind", [("fifo", "a FIFO"), ("/dev/zero", "a character device"),
                                       ("/dev/null", "a character device")])
def test_a_special_file_as_the_model_is_named_for_what_it_is(box, tmp_path, path, kind):
    import os

    if path == "fifo":
        path = str(tmp_path / "model.gguf")
        os.mkfifo(path)
    rc, document = box.converge("--check", "--set", f"model.main={path}")
    assert rc == 1, document
    models = next(r for r in document["roles"] if r["name"] == "models")
    assert models["msg"] == f"model.main: {path}: {kind}, not a regular file; the file was not used", models
