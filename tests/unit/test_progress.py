"""The progress a run shows while it waits: which log it follows, from where, and how far a download got."""
from __future__ import annotations

import io
from pathlib import Path

import yaml

from ds4_converge.cli.progress import Reporter, last_line
from ds4_converge.orchestrate.context import make_context
from ds4_converge.core.role_result import RoleResult
from ds4_converge.spec.loader import load_spec

REPO = Path(__file__).resolve().parents[2]


def context(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "engine": {"repo": "https://example.invalid/ds4.git", "ref": "v1", "target": "cpu"},
        "model": {"main": "hf://org/repo/model.gguf"}, "paths": {"root": str(tmp_path / "root")}}))
    return make_context(load_spec(spec))


def test_last_line_reads_only_what_was_written_after_the_offset(tmp_path):
    log = tmp_path / "ds4.log"
    log.write_text("old engine: bye\n")
    offset = log.stat().st_size
    assert last_line(log, offset) == ""
    with open(log, "a") as handle:
        handle.write("ds4: loading weights\n\nds4: CPU reading model weights 12.0 GiB\n\n")
    assert last_line(log, offset) == "ds4: CPU reading model weights 12.0 GiB"
    assert last_line(tmp_path / "missing.log", 0) == ""


def test_the_probe_wait_follows_the_engine_log_from_the_switch_on(tmp_path):
    ctx = context(tmp_path)
    log = ctx.layout.engine_log("ds4")
    log.parent.mkdir(parents=True)
    log.write_text("0101 00:00:00 ds4-server: bye\n")
    err = io.StringIO()
    reporter = Reporter("plain", interval=0, out=io.StringIO(), err=err)
    reporter.attach(ctx)
    reporter.role_started("probe")
    ctx.say("probing http://127.0.0.1:8000 (deadline 900s, soak 30s)")
    assert reporter.wait_line().startswith("probing http://127.0.0.1:8000 (deadline 900s, soak 30s) · 0s")
    assert "bye" not in reporter.wait_line(), "the old engine's last words are not the new one's progress"
    with open(log, "a") as handle:
        handle.write("0101 00:00:01 ds4: model /m.gguf (81.00 GiB, 1328 tensors)\n")
    assert reporter.wait_line().endswith("ds4.log: 0101 00:00:01 ds4: model /m.gguf (81.00 GiB, 1328 tensors)")
    assert "… probing" in err.getvalue()


def test_a_download_shows_how_far_it_got(tmp_path):
    ctx = context(tmp_path)
    ctx.layout.models.mkdir(parents=True)
    (ctx.layout.models / "model.gguf.partial").write_bytes(bytes(3 << 20))
    reporter = Reporter("plain", interval=0, out=io.StringIO(), err=io.StringIO())
    reporter.attach(ctx)
    reporter.role_started("models")
    ctx.say("downloading model.main to somewhere")
    assert reporter.wait_line().endswith("model.gguf.partial: 3.0 MiB so far"), reporter.wait_line()


def test_role_lines_are_timestamped_in_plain_mode_and_absent_in_quiet_mode(tmp_path):
    ctx = context(tmp_path)
    out = io.StringIO()
    reporter = Reporter("plain", interval=0, out=out, err=io.StringIO())
    reporter.attach(ctx)
    reporter.role_done(RoleResult("engine", "changed", "built r1", changes=["build release r1"]))
    first, second = out.getvalue().splitlines()
    assert first[:4].isdigit() and first.split()[2:5] == ["changed", "engine", "built"]
    assert second.strip() == "- build release r1"
    quiet_out = io.StringIO()
    quiet = Reporter("quiet", out=quiet_out, err=quiet_out)
    quiet.attach(ctx)
    quiet.role_done(RoleResult("engine", "ok", "built"))
    ctx.say("building")
    assert quiet_out.getvalue() == ""
