"""How a person runs this tool from their own shell: for the commands a message tells them to run next."""
from __future__ import annotations

import os
import shlex
import shutil
import sys

NAME = "ds4-converge"


def tool_command() -> str:
    """`ds4-converge` where that name on PATH is this installation; else this installation's own script (a venv
    not activated, as after `make run`: .venv/bin/ds4-converge); else this interpreter with -m."""
    script = os.path.join(sys.prefix, "bin", NAME)
    found = shutil.which(NAME)
    if os.path.exists(script):
        return NAME if found and os.path.samefile(found, script) else shlex.quote(os.path.abspath(script))
    if found:  # installed elsewhere (pip --user puts the script in ~/.local/bin, not under sys.prefix)
        return NAME
    return f"{shlex.quote(sys.executable)} -m ds4_converge.cli"
