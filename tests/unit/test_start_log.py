"""One engine start's share of the logs: its own lines only, and how it ended (from supervisord's log)."""
from ds4_converge.core.layout import Layout
from ds4_converge.service import start_log

SUPERVISORD_BEFORE = (
    "2026-12-01 03:00:00,001 INFO spawned: 'ds4' with pid 100\n"
    "2026-12-01 03:00:01,002 INFO success: ds4 entered RUNNING state, process has stayed up for > than 1 seconds\n"
    "2026-12-01 03:10:00,003 WARN exited: ds4 (exit status 2; not expected)\n")
SUPERVISORD_AFTER = (
    "2026-12-01 03:20:00,001 INFO spawned: 'ds4' with pid 200\n"
    "2026-12-01 03:20:00,300 WARN exited: ds4 (exit status 1; not expected)\n"
    "2026-12-01 03:20:01,001 INFO spawned: 'ds4' with pid 201\n"
    "2026-12-01 03:20:01,300 WARN exited: ds4 (terminated by SIGSEGV (core dumped); not expected)\n"
    "2026-12-01 03:20:01,400 WARN exited: other (exit status 3; not expected)\n")


def layout_with_logs(tmp_path, engine: str, supervisord: str) -> Layout:
    layout = Layout(tmp_path)
    layout.logs.mkdir(parents=True)
    layout.engine_log("ds4").write_text(engine)
    layout.supervisord_log.write_text(supervisord)
    return layout


def test_only_what_this_start_wrote(tmp_path):
    layout = layout_with_logs(tmp_path, "ds4: old engine\n1201 03:00:01 ds4-server: listening on http://x\n",
                              SUPERVISORD_BEFORE)
    mark = start_log.mark(layout, "ds4")
    with open(layout.engine_log("ds4"), "a") as log:
        log.write("ds4: GGUF tokenizer token table is missing or invalid\n")
    with open(layout.supervisord_log, "a") as log:
        log.write(SUPERVISORD_AFTER)
    assert start_log.engine_lines(mark) == "ds4: GGUF tokenizer token table is missing or invalid\n"
    assert start_log.exits(mark, "ds4") == ["exit status 1", "terminated by SIGSEGV (core dumped)"]
    assert start_log.exits(mark, "other") == ["exit status 3"]


def test_a_start_that_wrote_nothing(tmp_path):
    layout = layout_with_logs(tmp_path, "ds4: old engine\n", SUPERVISORD_BEFORE)
    mark = start_log.mark(layout, "ds4")
    assert start_log.engine_lines(mark) == "" and start_log.exits(mark, "ds4") == []


def test_a_log_rotated_since_the_mark_is_read_whole(tmp_path):
    layout = layout_with_logs(tmp_path, "x" * 1000 + "\n", SUPERVISORD_BEFORE * 10)
    mark = start_log.mark(layout, "ds4")
    layout.engine_log("ds4").write_text("ds4: new\n")  # supervisord rotated it: shorter than the mark
    layout.supervisord_log.write_text(SUPERVISORD_AFTER)
    assert start_log.engine_lines(mark) == "ds4: new\n"
    assert start_log.exits(mark, "ds4")[0] == "exit status 1"


def test_no_logs_yet(tmp_path):
    mark = start_log.mark(Layout(tmp_path), "ds4")
    assert start_log.engine_lines(mark) == "" and start_log.exits(mark, "ds4") == []
