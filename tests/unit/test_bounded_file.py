"""core/bounded_file: a file is read only as a regular file, without blocking, up to a bound; JSON nested thousands
deep is a ValueError, not a RecursionError. The tool's own records go through it too: a FIFO or a bomb planted
there is "no record", never a hang or an internal error."""
import os

import pytest

from ds4_converge.core import bounded_file
from ds4_converge.core.layout import Layout


def test_a_fifo_a_device_and_a_folder_are_refused_as_what_they_are_without_blocking(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, words in ((fifo, "a FIFO"), ("/dev/zero", "a character device"), (tmp_path, "a directory")):
        with pytest.raises(bounded_file.FileRefused, match=f"^{words}, not a regular file$") as info:
            bounded_file.read(path, 1024, "a test file")
        assert isinstance(info.value, OSError) and isinstance(info.value, ValueError) and not info.value.too_large


def test_a_file_over_its_bound_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "big"
    with open(big, "wb") as handle:
        handle.truncate(3 << 30)  # sparse: 3 GiB apparent, nothing on disk
    with pytest.raises(bounded_file.FileRefused, match="^3.0 GiB, more than the 4.0 MiB a key file may hold$") as info:
        bounded_file.read(big, 4 << 20, "a key file")
    assert info.value.too_large
    small = tmp_path / "small"
    small.write_bytes(b"x" * 10)
    assert bounded_file.read(small, 10, "a test file") == b"x" * 10


def test_json_nested_thousands_deep_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="nested too deep"):
        bounded_file.load_json("[" * 5000 + "]" * 5000)
    assert bounded_file.load_json('{"a": [[1]]}') == {"a": [[1]]}


@pytest.mark.parametrize("plant", ["fifo", "deep"])
def test_the_tools_own_records_read_a_planted_fifo_or_bomb_as_none(tmp_path, plant):
    from ds4_converge.engine.pins import PinCache
    from ds4_converge.models.digests import _read_entries
    from ds4_converge.service import guard, secrets

    layout = Layout(tmp_path / "root")
    layout.run.mkdir(parents=True)
    paths = [tmp_path / "digests.json", guard.intent_path(layout), layout.run / "secrets.json", tmp_path / "pins.json"]
    for path in paths:
        if plant == "fifo":
            os.mkfifo(path)
        else:
            path.write_text("[" * 3000 + "]" * 3000)
    assert _read_entries(paths[0]) == {}
    assert guard.read_intent(layout) == {"pid": 0, "start": None, "name": None}
    assert secrets._stored(layout) == {}
    assert PinCache(paths[3])._load() == {}


@pytest.mark.parametrize("plant", ["fifo", "deep"])
def test_the_watchdogs_settings_and_incident_log_read_a_planted_fifo_or_bomb_as_none(tmp_path, plant):
    from ds4_converge.service import watchdog

    layout = Layout(tmp_path / "root")
    for path in (watchdog.settings_path(layout), watchdog.incidents_path(layout)):
        path.parent.mkdir(parents=True, exist_ok=True)
        if plant == "fifo":
            os.mkfifo(path)
        else:
            path.write_text("[" * 3000 + "]" * 3000 + "\n")
    assert watchdog.read_settings(layout) is None
    assert watchdog.incidents(layout) == []


def test_a_growing_results_file_is_read_from_its_end_and_a_fifo_is_no_history(tmp_path, monkeypatch):
    from ds4_converge.health import bench

    results = tmp_path / "results.jsonl"
    results.write_text("".join(f'{{"n": {n}}}\n' for n in range(1000)))
    monkeypatch.setattr(bench, "HISTORY_BYTES", 100)  # ~10 of its 1000 lines
    newest = bench.history(results)
    assert newest and newest[-1] == {"n": 999} and len(newest) < 15
    assert [r["n"] for r in newest] == list(range(1000 - len(newest), 1000))  # whole lines only, none cut
    monkeypatch.setattr(bench, "HISTORY_BYTES", 1 << 20)
    assert len(bench.history(results)) == 1000
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    assert bench.history(fifo) == []
