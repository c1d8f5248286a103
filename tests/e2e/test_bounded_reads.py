"""Files a spec names that the tool reads (front.keys, health.warmup) or hands to HAProxy (front.tls): a FIFO or a
device is refused as what it is, and a file larger than its field can hold is refused by preflight naming the field,
before anything changes (a 3 GiB key file took half a minute; a 3 GiB warm-up file under a memory cap reverted a
healthy release)."""
import json
import os

import pytest

from boxes import with_front


def _make(path, kind: str, size: int) -> str:
    if kind == "fifo":
        os.mkfifo(path, 0o600)
        return str(path)
    if kind == "device":
        return "/dev/zero"
    with open(path, "wb") as handle:  # sparse: the size without the disk
        handle.truncate(size)
    os.chmod(path, 0o600)
    return str(path)


@pytest.mark.parametrize("field, kind, words", [
    ("front.keys", "huge", "is 5.0 MiB, more than the 4.0 MiB a key file may hold"),
    ("front.keys", "fifo", "is a FIFO, not a regular file"),
    ("front.tls.cert", "huge", "is 2.0 MiB, more than the 1.0 MiB a PEM file may hold"),
    ("front.tls.key", "device", "/dev/zero is a character device, not a regular file"),
    ("health.warmup[0]", "huge", ": 1.5 MiB, more than the 1.0 MiB a warm-up prompt for server.ctx 32768 may hold"),
    ("health.warmup[0]", "fifo", ": a FIFO, not a regular file"),
    ("health.warmup[0]", "device", "/dev/zero: a character device, not a regular file"),
])
def test_a_special_or_oversized_file_is_refused_by_preflight_naming_its_field(box, tmp_path, field, kind, words):
    size = {"front.keys": 5 << 20, "health.warmup[0]": 3 << 19}.get(field, 2 << 20)
    path = _make(tmp_path / "named-file", kind, size)
    if field.startswith("front."):
        with_front(box)
        if field == "front.keys":
            box.spec["front"]["keys"] = path
        else:
            box.spec["front"]["tls"] = {"cert": str(tmp_path / "cert.pem"), "key": str(tmp_path / "key.pem"),
                                        field.split(".")[-1]: path}
            for pem in ("cert.pem", "key.pem"):
                (tmp_path / pem).write_text("-----BEGIN NOTHING-----\n")
    else:
        box.spec["health"]["warmup"] = [path]
    box.write()
    proc = box.cli(str(box.spec_path), "--json", "--check", timeout=60)
    document = json.loads(proc.stdout)
    assert proc.returncode == 1 and f"{field}: " in document["error"] and words in document["error"], document
    assert not box.root.exists()


@pytest.mark.parametrize("kind", ["fifo", "nested 2,000 deep"])
def test_status_with_a_last_run_record_that_is_a_fifo_or_nested_deep_says_no_last_run(box, kind):
    """The tool's own records are read the same way: a FIFO never blocks status, deep JSON is no internal error."""
    from ds4_converge.cli.session import LAST_RUN

    record = box.root / "logs" / LAST_RUN
    record.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(record, 0o600)
    else:
        record.write_text('{"command": ' + "[" * 2000 + "]" * 2000 + "}")
    rc, status = box.json("status", str(box.spec_path))  # nothing serves here: exit 4
    assert rc == 4 and status["aborted"] is None and status["last_run"] is None, status
