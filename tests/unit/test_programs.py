"""haproxy is found where Debian and Ubuntu install it, /usr/sbin, which is not on a plain user's PATH."""
from __future__ import annotations

import os

from ds4_converge.facts import programs


def _executable(folder, name="haproxy"):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return str(path)


def test_haproxy_in_sbin_is_found_without_it_on_path(tmp_path, monkeypatch):
    sbin = _executable(tmp_path / "sbin")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # a plain user's PATH: no sbin
    monkeypatch.setattr(programs, "SBIN", (str(tmp_path / "local-sbin"), str(tmp_path / "sbin")))
    assert programs.haproxy() == sbin


def test_the_one_on_path_comes_first(tmp_path, monkeypatch):
    on_path = _executable(tmp_path / "bin")
    _executable(tmp_path / "sbin")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(programs, "SBIN", (str(tmp_path / "sbin"),))
    assert programs.haproxy() == on_path


def test_none_anywhere_is_none_and_the_message_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(programs, "SBIN", (str(tmp_path / "sbin"),))
    assert programs.haproxy() is None
    assert programs.haproxy_looked_in() == f"PATH, {tmp_path / 'sbin'}"


def test_the_debian_folders_are_looked_in():
    assert "/usr/sbin" in programs.SBIN and "/usr/local/sbin" in programs.SBIN
    assert os.pathsep not in "".join(programs.SBIN)
