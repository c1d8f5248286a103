"""The switch guard and the watchdog share their main and their log line (service/resident.py)."""
import re

from ds4_converge.core.layout import Layout
from ds4_converge.service import guard, resident, watchdog


def test_a_resident_program_watches_the_root_it_is_given_and_says_what_it_watches(tmp_path, capsys):
    watched = []
    assert resident.main([str(tmp_path)], "ds4_converge.service.x", watched.append,
                         lambda layout: f"watching {layout.root}") == 0
    assert watched == [Layout(tmp_path)]
    line = capsys.readouterr().out
    assert re.fullmatch(rf"\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00 watching {re.escape(str(tmp_path))}\n", line), line


def test_the_guard_and_the_watchdog_say_their_usage_and_watch_nothing_without_one_root(capsys):
    assert guard.main([]) == 2 and watchdog.main(["a", "b"]) == 2
    said = capsys.readouterr().err
    assert said == ("usage: python -m ds4_converge.service.guard ROOT\n"
                    "usage: python -m ds4_converge.service.watchdog ROOT\n")
