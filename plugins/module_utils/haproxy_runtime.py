# -*- coding: utf-8 -*-
# Copyright (c) ds4-converge contributors
# MIT License (see LICENSE at the repository root, or https://opensource.org/licenses/MIT)
# SPDX-License-Identifier: MIT
"""HAProxy's runtime API (the admin socket, C(stats socket PATH level admin)): the collection's one client of it.

The module haproxy_server drains and puts back servers with it; molecule/haproxy/traffic.py polls the servers'
statuses with it while a rollout runs. Python's standard library only (no socat), so it runs on any host that
has a Python, and imports nothing of Ansible (traffic.py loads it as a plain file).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import csv
import socket
import time

TIMEOUT_S = 10
# the rows of `show stat` that are not servers: the frontend's and each backend's totals
TOTALS = ("FRONTEND", "BACKEND")


class RuntimeClient(object):
    """One admin socket; every command is one connection (non-interactive: HAProxy answers, then closes it),
    and the whole exchange is bounded by `timeout` seconds (socket.timeout, an OSError, when it runs past)."""

    def __init__(self, path, timeout=TIMEOUT_S):
        self.path = path
        self.timeout = timeout

    def ask(self, command):
        """HAProxy's answer to one command, as text."""
        deadline = time.monotonic() + self.timeout
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.path)
            sock.sendall((command + "\n").encode())
            chunks = []
            while True:
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                data = sock.recv(65536)
                if not data:
                    break
                chunks.append(data)
        finally:
            sock.close()
        return b"".join(chunks).decode("utf-8", "replace")

    def stat(self):
        """Every row of `show stat`, each a dict by its CSV header (pxname, svname, status, scur, ...)."""
        text = self.ask("show stat")
        lines = text.splitlines()
        if not lines or not lines[0].startswith("# "):
            raise ValueError("unexpected answer to 'show stat': %s" % text.strip()[:200])
        header = lines[0][2:].split(",")
        return [dict(zip(header, row)) for row in csv.reader(lines[1:])]

    def server(self, backend, server):
        """The server's row of `show stat`, or None when the backend has no such server."""
        for row in self.stat():
            if row.get("pxname") == backend and row.get("svname") == server:
                return row
        return None

    def statuses(self):
        """{server: status} of every server of every backend (UP, DOWN, MAINT, DRAIN, no check, ...)."""
        return dict((row["svname"], row.get("status")) for row in self.stat()
                    if row.get("svname") not in TOTALS + (None,))

    def set_state(self, backend, server, state):
        """`set server BACKEND/SERVER state STATE` (ready, drain, maint); HAProxy's answer, empty when it worked."""
        return self.ask("set server %s/%s state %s" % (backend, server, state)).strip()


def admin_state(row):
    """A server's administrative state as the module names it (ready, drain, maint), its status and sessions."""
    status = row.get("status", "")
    if status.startswith("MAINT"):
        state = "maint"
    elif status.startswith("DRAIN"):
        state = "drain"
    else:
        state = "ready"
    return dict(state=state, status=status, sessions=int(row.get("scur") or 0))
