"""Where the system programs the tool runs are: on PATH, or where Debian and Ubuntu install them."""
from __future__ import annotations

import os
import shutil

# Debian and Ubuntu install haproxy into /usr/sbin, which is on root's PATH but not on a plain user's; a
# hand-built one goes to /usr/local/sbin
SBIN = ("/usr/local/sbin", "/usr/sbin")


def haproxy() -> str | None:
    """The haproxy the front door runs: the first on PATH, else /usr/local/sbin's, else /usr/sbin's."""
    return shutil.which("haproxy") or shutil.which("haproxy", path=os.pathsep.join(SBIN))


def haproxy_looked_in() -> str:
    """Where haproxy() looked, in words, for a message that says it was not found."""
    return "PATH, " + ", ".join(SBIN)
