"""engine.prepare is bounded (engine.prepare_timeout_s: its whole process group killed, a message naming the field)
and whatever bytes it prints never break the run."""
import os
import sys

from ds4_converge.core import processes


def test_a_prepare_that_hangs_is_ended_with_a_message_and_leaves_nothing_running(box, tmp_path):
    marker = tmp_path / "hung-prepare"
    # durations no other test sleeps for: the check below looks at every process of the machine
    box.spec["engine"]["prepare"] = ["sh", "-c", f"sleep 300.137 & echo started > {marker}; sleep 301.137"]
    box.spec["engine"]["prepare_timeout_s"] = 2
    box.write()
    proc = box.cli(str(box.spec_path), timeout=90)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "engine.prepare timed out after 2s" in proc.stdout + proc.stderr, proc.stdout
    assert marker.exists(), "it really ran"
    left = [p.pid for p in processes.every() if any(a in (b"300.137", b"301.137") for a in processes.cmdline(p.pid))
            and processes.cmdline(p.pid)[:1] == [b"sleep"]]
    assert not left, "its whole process group was killed"


def test_a_prepare_that_prints_binary_output_does_not_fail_the_run(box):
    box.spec["engine"]["prepare"] = [sys.executable, "-c",
                                     "import sys; sys.stdout.buffer.write(bytes(range(256)) * 64);"
                                     "sys.stderr.buffer.write(b'\\xff\\xfe\\x80 not utf-8')"]
    box.write()
    rc, document = box.converge()
    assert rc == 0, document
    assert box.status()["healthy"]
    assert os.path.isdir(box.root / "releases" / document["release"])
