"""The command a message tells a person to run names this tool as their shell can run it (tool_command.py)."""
import os
import sys
from pathlib import Path

from ds4_converge.tool_command import tool_command

SCRIPT = Path(sys.prefix) / "bin" / "ds4-converge"


def test_after_make_run_the_venvs_own_script_is_named(monkeypatch):
    # `make run` installs into .venv without activating it: `ds4-converge` alone is not found
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert SCRIPT.exists(), "the tests run from the venv the tool is installed in"
    assert tool_command() == str(SCRIPT.absolute())


def test_an_activated_venv_or_an_installed_tool_is_named_plainly(monkeypatch):
    monkeypatch.setenv("PATH", f"{SCRIPT.parent}{os.pathsep}/usr/bin:/bin")
    assert tool_command() == "ds4-converge"


def test_another_ds4_converge_first_on_path_is_not_taken_for_this_one(monkeypatch, tmp_path):
    other = tmp_path / "ds4-converge"
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}/usr/bin:/bin")
    assert tool_command() == str(SCRIPT.absolute())
