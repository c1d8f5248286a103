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
  - Talks to the socket with Python's standard library only (no socat), through the collection's runtime client
    (C(plugins/module_utils/haproxy_runtime.py)).
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

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ds4.converge.plugins.module_utils.haproxy_runtime import RuntimeClient, admin_state

POLL_S = 0.2
ARGUMENT_SPEC = dict(
    socket=dict(type="path", required=True),
    backend=dict(type="str", required=True),
    server=dict(type="str", required=True),
    state=dict(type="str", choices=["ready", "drain", "maint"], required=True),
    wait=dict(type="bool", default=True),
    timeout=dict(type="int", default=60),
)


class Server(object):
    """The server this task moves: its state read, set and waited for on the runtime API; every failure ends the
    task with HAProxy's words and what the result holds so far."""

    def __init__(self, module, result):
        params = module.params
        self.module, self.result = module, result
        self.client = RuntimeClient(params["socket"])
        self.backend, self.server = params["backend"], params["server"]
        self.name = "%s/%s" % (self.backend, self.server)
        self.started = time.monotonic()
        self.deadline = self.started + params["timeout"]

    def current(self):
        try:
            row = self.client.server(self.backend, self.server)
        except (OSError, ValueError) as exc:
            self.module.fail_json(msg="HAProxy's runtime API at %s: %s" % (self.client.path, exc))
        if row is None:
            self.module.fail_json(msg="HAProxy has no server %s (show stat)" % self.name)
        return admin_state(row)

    def set_state(self, state):
        answer = self.client.set_state(self.backend, self.server, state)
        if answer:  # HAProxy says nothing when the command worked
            self.module.fail_json(msg="HAProxy refused 'set server %s state %s': %s" % (self.name, state, answer),
                                  **self.result)

    def wait_until(self, done, what):
        now = self.current()
        while not done(now):
            if time.monotonic() >= self.deadline:
                self.result.update(after=now, waited_s=self.waited_s())
                self.module.fail_json(msg="%s: not %s within %ss (status %s, %d sessions)"
                                      % (self.name, what, self.module.params["timeout"], now["status"],
                                         now["sessions"]), **self.result)
            time.sleep(POLL_S)
            now = self.current()
        return now

    def waited_s(self):
        return round(time.monotonic() - self.started, 2)


def move(server, before, wanted, wait):
    """From `before` to `wanted`: drain first (new requests go elsewhere, running ones finish), wait as asked."""
    if wanted in ("drain", "maint"):
        if before["state"] == "ready":
            server.set_state("drain")
        if wait:
            server.wait_until(lambda now: now["sessions"] == 0, "idle")
        if wanted == "maint" and before["state"] != "maint":
            server.set_state("maint")
    elif before["state"] != wanted:
        server.set_state("ready")
    if wanted == "ready" and wait:
        server.wait_until(lambda now: now["status"].startswith("UP") or now["status"] == "no check", "up")


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    wanted = module.params["state"]
    result = dict(changed=False, waited_s=0.0)
    server = Server(module, result)
    before = server.current()
    result.update(changed=before["state"] != wanted, before=before, after=before)
    if module._diff:
        result["diff"] = dict(before="%s: %s\n" % (server.name, before["state"]),
                              after="%s: %s\n" % (server.name, wanted))
    if module.check_mode:
        result["after"] = dict(before, state=wanted)
        module.exit_json(**result)
    move(server, before, wanted, module.params["wait"])
    result.update(after=server.current(), waited_s=server.waited_s())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
