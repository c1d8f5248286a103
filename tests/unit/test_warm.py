"""Which warm process may serve a command (cli/warm.py): the socket's key changes with everything a forked run
would inherit instead of importing, and DS4_CONVERGE_WARM says whether to use or start one."""
from __future__ import annotations

import os

import pytest

from ds4_converge.cli import warm


@pytest.mark.parametrize("value, expected", [("", "auto"), ("auto", "auto"), ("0", "off"), ("off", "off"),
                                             ("no", "off"), ("1", "on"), ("ON", "on"), ("yes", "on")])
def test_policy(monkeypatch, value, expected):
    monkeypatch.setenv(warm.ENV, value)
    assert warm.policy() == expected


def test_the_key_changes_with_the_tool_the_libraries_and_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    libraries = tmp_path / "site-packages"
    libraries.mkdir()
    path = ["", str(libraries)]
    base = warm.key(path)
    assert warm.key(path) == base, "the same process state gives the same key"
    assert warm.key(["/elsewhere", str(libraries)]) != base, "another import path"
    os.utime(libraries, ns=(1, 1))  # pip installs or removes a package: the folder's mtime changes
    assert warm.key(path) != base
    changed = warm.key(path)
    monkeypatch.setattr(warm, "tool_fingerprint", lambda: "an edited tool")
    assert warm.key(path) != changed
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "another-cache"))
    assert warm.key(path) != changed


def test_the_working_directory_is_not_part_of_the_key(monkeypatch, tmp_path):
    """path[0] is the script's folder or the working directory: files written there change nothing."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    work = tmp_path / "work"
    work.mkdir()
    before = warm.key([str(work)])
    (work / "new-file").write_text("x")
    assert warm.key([str(work)]) == before


def test_no_user_cache_no_warm_process(monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    monkeypatch.setenv("HOME", "relative-home")
    monkeypatch.setenv(warm.ENV, "1")
    assert warm.folder() is None
    assert warm.forward(["spec.yaml"]) is None


def test_nothing_listens_the_command_runs_here(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(warm.ENV, "0")
    assert warm.forward(["spec.yaml"]) is None and warm._State.missing is None
    monkeypatch.setenv(warm.ENV, "1")
    assert warm.forward(["spec.yaml"]) is None
    assert warm._State.missing == warm.key(), "asked for: the caller starts one after the command"
    warm._State.missing = None


def test_a_caller_that_gave_up_is_not_served():
    """A caller that stopped waiting runs the command itself: the warm process must not run it too."""
    import socket

    from ds4_converge.cli import warm_server

    waiting, server_side = socket.socketpair()
    server_side.settimeout(10)  # as the warm process has it: the check must not wait for data
    assert not warm_server._caller_gone(server_side)
    waiting.close()
    assert warm_server._caller_gone(server_side)
    assert server_side.gettimeout() == 10
    server_side.close()
