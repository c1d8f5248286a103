#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) ds4-converge contributors
# MIT License (see LICENSE at the repository root, or https://opensource.org/licenses/MIT)
# SPDX-License-Identifier: MIT
"""Ansible module ds4.converge.haproxy_server: one server of an HAProxy backend, through the runtime API.

community.general.haproxy does the same and more, but it comes only with the whole `ansible` package (hundreds of
collections) or from Galaxy (online); the fleet needs three commands of the runtime API, so they are here.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: haproxy_server
short_description: Drain, take out or put back one server of an HAProxy backend (runtime API)
version_added: 0.1.0
author: ds4-converge maintainers (@ds4-converge)
description:
  - Sets a server's administrative state through HAProxy's runtime API (the admin socket,
    C(stats socket PATH level admin)) - C(set server BACKEND/SERVER state STATE) - and waits until the server is
    where a rolling upgrade needs it.
  - V(drain) - no new connections; then waits until its sessions (C(scur) of C(show stat)) are 0.
    V(maint) - out of the backend (after draining first when it still has sessions, within O(timeout)).
    V(ready) - back in the backend; then waits until HAProxy counts it as up (C(UP), or C(no check)).
  - Changes nothing when the server is in that state already.
options:
  socket:
    description: HAProxy's admin socket on the host.
    type: path
    required: true
  backend:
    description: The backend (C(pxname)).
    type: str
    required: true
  server:
    description: The server in that backend (C(svname)).
    type: str
    required: true
  state:
    description: The administrative state to set.
    type: str
    choices: [ready, drain, maint]
    required: true
  wait:
    description: Wait as described above, up to O(timeout) seconds (the task fails when that passes).
    type: bool
    default: true
  timeout:
    description: Seconds to wait.
    type: int
    default: 60
extends_documentation_fragment:
  - ds4.converge.attributes
attributes:
  check_mode:
    support: full
    details: Reads the server's state and says whether it would change; sends no C(set) command.
  diff_mode:
    support: full
    details: The server's state before and after.
notes:
  - Talks to the socket with Python's standard library only (no socat).
"""

EXAMPLES = r"""
- name: Take spark1 out of the backend (no new requests, wait for the running ones)
  ds4.converge.haproxy_server:
    socket: /run/haproxy/admin.sock
    backend: ds4
    server: spark1
    state: maint
  delegate_to: lb1

- name: Put it back once its new release answers
  ds4.converge.haproxy_server:
    socket: /run/haproxy/admin.sock
    backend: ds4
    server: spark1
    state: ready
  delegate_to: lb1
"""

RETURN = r"""
before:
  description: The server's state before - V(ready), V(drain) or V(maint) - and HAProxy's status.
  returned: always
  type: dict
  sample: {state: ready, status: UP, sessions: 1}
after:
  description: The same, after.
  returned: always
  type: dict
  sample: {state: maint, status: MAINT, sessions: 0}
waited_s:
  description: Seconds spent waiting.
  returned: always
  type: float
"""

import csv
import socket
import time

from ansible.module_utils.basic import AnsibleModule

POLL_S = 0.2


def ask(path, command, timeout=10):
    """One command on the runtime API (non-interactive: HAProxy answers, then closes the connection)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
        sock.sendall((command + "\n").encode())
        chunks = []
        while True:
            data = sock.recv(65536)
            if not data:
                break
            chunks.append(data)
    finally:
        sock.close()
    return b"".join(chunks).decode("utf-8", "replace")


def server_row(path, backend, server):
    """The server's line of `show stat` (a dict by CSV header), or None."""
    text = ask(path, "show stat")
    lines = text.splitlines()
    if not lines or not lines[0].startswith("# "):
        raise ValueError("unexpected answer to 'show stat': %s" % text.strip()[:200])
    header = lines[0][2:].split(",")
    for row in csv.reader(lines[1:]):
        found = dict(zip(header, row))
        if found.get("pxname") == backend and found.get("svname") == server:
            return found
    return None


def state_of(row):
    status = row.get("status", "")
    sessions = int(row.get("scur") or 0)
    if status.startswith("MAINT"):
        state = "maint"
    elif status.startswith("DRAIN"):
        state = "drain"
    else:
        state = "ready"
    return dict(state=state, status=status, sessions=sessions)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            socket=dict(type="path", required=True),
            backend=dict(type="str", required=True),
            server=dict(type="str", required=True),
            state=dict(type="str", choices=["ready", "drain", "maint"], required=True),
            wait=dict(type="bool", default=True),
            timeout=dict(type="int", default=60),
        ),
        supports_check_mode=True,
    )
    params = module.params
    path, backend, server, wanted = params["socket"], params["backend"], params["server"], params["state"]
    name = "%s/%s" % (backend, server)

    def current():
        try:
            row = server_row(path, backend, server)
        except (OSError, ValueError) as exc:
            module.fail_json(msg="HAProxy's runtime API at %s: %s" % (path, exc))
        if row is None:
            module.fail_json(msg="HAProxy has no server %s (show stat)" % name)
        return state_of(row)

    before = current()
    changed = before["state"] != wanted
    result = dict(changed=changed, before=before, after=before, waited_s=0.0)
    if module._diff:
        result["diff"] = dict(before="%s: %s\n" % (name, before["state"]), after="%s: %s\n" % (name, wanted))
    if module.check_mode:
        result["after"] = dict(before, state=wanted)
        module.exit_json(**result)

    started = time.monotonic()
    deadline = started + params["timeout"]

    def set_state(state):
        answer = ask(path, "set server %s state %s" % (name, state)).strip()
        if answer:  # HAProxy says nothing when the command worked
            module.fail_json(msg="HAProxy refused 'set server %s state %s': %s" % (name, state, answer), **result)

    def wait_until(done, what):
        now = current()
        while not done(now):
            if time.monotonic() >= deadline:
                result["after"] = now
                result["waited_s"] = round(time.monotonic() - started, 2)
                module.fail_json(msg="%s: not %s within %ss (status %s, %d sessions)"
                                 % (name, what, params["timeout"], now["status"], now["sessions"]), **result)
            time.sleep(POLL_S)
            now = current()
        return now

    if wanted in ("drain", "maint"):
        if before["state"] == "ready":
            set_state("drain")  # new requests go elsewhere, running ones finish
        if params["wait"]:
            wait_until(lambda now: now["sessions"] == 0, "idle")
        if wanted == "maint" and before["state"] != "maint":
            set_state("maint")
    elif changed:
        set_state("ready")
    if wanted == "ready" and params["wait"]:
        wait_until(lambda now: now["status"].startswith("UP") or now["status"] == "no check", "up")
    result["after"] = current()
    result["waited_s"] = round(time.monotonic() - started, 2)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
