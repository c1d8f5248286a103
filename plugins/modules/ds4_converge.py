#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) ds4-converge contributors
# MIT License (see LICENSE at the repository root, or https://opensource.org/licenses/MIT)
# SPDX-License-Identifier: MIT
"""Ansible module ds4.converge.ds4_converge: write a host's spec and run `ds4-converge` on it there.

It talks to the tool only through its command line and the JSON document `--json` prints (the CLI contract in
the project README), never through its Python package, so it keeps working whatever the package looks like
inside and whichever Python the tool was installed with.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: ds4_converge
short_description: Converge, stop or roll back a DGX Spark with ds4-converge (build, serve, probe, revert)
version_added: 0.1.0
author: ds4-converge maintainers (@ds4-converge)
description:
  - Writes the host's spec to O(path) and runs C(ds4-converge PATH --json) on the host (O(state=converged)),
    C(ds4-converge stop PATH --json) (O(state=stopped)) or C(ds4-converge rollback PATH --json)
    (O(state=rolled_back)). The tool does the work
    (build the engine release, switch the supervisord program, probe C(/v1/models) and a smoke answer, soak,
    record the release as last good) and B(reverts to the last good release) when the new one fails its probe.
  - O(state=converged) - the tool does the work
    (see below). The task is C(changed) when the spec file changed or the tool changed anything (its
    report's C(changed)). A second run on a converged host changes nothing and does not restart the engine.
  - O(state=stopped) - the engine and the supervisord ds4-converge started are stopped (nothing else); C(changed)
    when something ran. A second run changes nothing.
  - O(state=rolled_back) - back to last good (when what runs is not last good), or from last good to the good
    release before it, through the same probe. An action, not a state - every run that rolls back is
    C(changed); a host that was never converged fails.
  - When the tool fails the task fails with the tool's own message, whether it reverted and which release
    serves now (RV(reverted), RV(release)).
  - Drives the tool through its command line and JSON report only; the tool must be installed on the host
    (see O(executable)).
options:
  spec:
    description:
      - The spec as a dict (C(engine), C(model), C(server), C(health), C(paths), ...), as documented in the
        project README under "Spec reference". It is validated by the tool, which names the field at fault.
      - Written to O(path) as YAML with sorted keys (as JSON, which is YAML too, when PyYAML cannot be imported
        by the module's Python). Relative paths in it are relative to the directory of O(path); prefer
        absolute ones.
      - When omitted the file already at O(path) is used as it is.
    type: dict
  path:
    description:
      - Where the spec file lives on the host. Its directory is created (V(0755)) when missing.
    type: path
    default: /etc/ds4-converge/spec.yaml
  spec_source:
    description:
      - What produced O(spec) (a variable, the template it came from), named in place of a file when the tool
        refuses the new spec - C(<new spec from SOURCE>:LINE:COL), lines of the YAML the module rendered (the
        result's RV(spec_text)). The refused text never replaced O(path), which still holds the spec before.
      - The role sets V(ds4_converge_spec).
    type: str
    default: spec
  mode:
    description:
      - Permissions of the spec file, in octal (V("0644")) or symbolic form.
    type: raw
    default: "0644"
  overrides:
    description:
      - Spec values that win over the file for this run, each C(dotted.key=value) (the tool's C(--set)),
        for example V(server.ctx=65536).
    type: list
    elements: str
    default: []
    aliases: [set]
  executable:
    description:
      - The C(ds4-converge) command on the host.
      - By default it is looked up on E(PATH), then in C(/opt/ds4-converge/bin).
    type: path
  state:
    description:
      - V(converged) - build, switch, probe, revert on a failed probe (C(ds4-converge PATH)).
      - V(stopped) - stop the engine and its supervisord (C(ds4-converge stop PATH)).
      - V(rolled_back) - back to the previous good release, through the probe (C(ds4-converge rollback PATH)).
    type: str
    choices: [converged, stopped, rolled_back]
    default: converged
extends_documentation_fragment:
  - ds4.converge.attributes
attributes:
  check_mode:
    support: full
    details:
      - O(state=converged) runs C(ds4-converge --check) against the new spec, which plans without changing any
        file or process. The new spec is written to a scratch file beside O(path) (so relative paths resolve
        the same) and removed again; the real spec file is not touched.
      - O(state=stopped) and O(state=rolled_back) ask C(ds4-converge status) (read-only) whether anything
        runs, or whether there is a release to roll back to.
  diff_mode:
    support: full
    details:
      - The spec file's before and after, and for O(state=converged) the tool's unified diffs (C(--diff)) of
        every rendered file and command line it changes or would change (supervisord and program files, the
        engine's command line, the release it builds).
notes:
  - Exit codes of the tool map onto the task - 0 ok or changed; 1 failed, reverted or not (RV(reverted));
    2 invalid spec (the messages name file, line and field); 3 another run holds the lock of this root.
  - A new spec is written beside O(path) first and checked with C(ds4-converge validate) (with O(overrides));
    an invalid one fails the task with the tool's messages and leaves the spec file as it was. A valid one
    replaces the spec file before the tool runs, also when the run then fails - the host keeps serving its last
    good release, and the next run tries the new spec again.
"""

EXAMPLES = r"""
- name: Converge this Spark (build, switch, probe; reverts on its own when the new engine is not healthy)
  ds4.converge.ds4_converge:
    path: /etc/ds4-converge/spec.yaml
    spec:
      engine:
        repo: https://github.com/Entrpi/ds4.git
        installer: https://raw.githubusercontent.com/Entrpi/ds4-on-spark/main/install.sh
        target: cuda-spark
      model: {main: /srv/gguf/Huihui-DeepSeek-V4-Flash-BF16-abliterated-ds4-Q2.gguf}
      server: {host: 127.0.0.1, port: 8000, ctx: 524288}
      health: {deadline_s: 900, soak_s: 30}
      paths: {root: /var/lib/ds4-converge}
  register: converged

- name: Say which release serves
  ansible.builtin.debug:
    msg: "{{ converged.release }} at {{ converged.endpoint }}"

- name: Use the spec file already on the host, with a larger context for this run
  ds4.converge.ds4_converge:
    path: /etc/ds4-converge/spec.yaml
    overrides: [server.ctx=65536]
    executable: /opt/ds4-converge/bin/ds4-converge

- name: Plan only (same as running the play with --check --diff)
  ds4.converge.ds4_converge:
    spec: "{{ ds4_converge_spec }}"
  check_mode: true
  diff: true

- name: Stop the engine (and the supervisord ds4-converge started)
  ds4.converge.ds4_converge:
    state: stopped

- name: Put the previous good release back, through the probe
  ds4.converge.ds4_converge:
    state: rolled_back
"""

RETURN = r"""
spec_text:
  description:
    - The new spec's YAML as the module rendered it from O(spec), when the tool refused it (exit 2); the line
      numbers of the message are its lines. The file at O(path) was not replaced.
  returned: when the new spec is invalid
  type: str
release:
  description: The release serving after the run (after a revert, the last good one); null when none.
  returned: always
  type: str
  sample: 6f2b8dabb4fb-cpu-nocuda
endpoint:
  description: The engine's base URL (append C(/v1)).
  returned: always
  type: str
  sample: http://127.0.0.1:8000
front:
  description:
    - The front door, when the spec has one (C(front)) - its public C(url) (what clients use, with a key in
      their C(Authorization) header), the engine slot it sends clients to (C(points_at)), whether HAProxy is C(up),
      and the C(metrics) URL. Null without a front door; O(spec) passes C(front) to the tool as it is.
  returned: always
  type: dict
  sample: {url: "http://127.0.0.1:8000", points_at: "127.0.0.1:8001", up: true, metrics: "http://127.0.0.1:8405/metrics"}
reverted:
  description: The new release failed and the last good one was put back (the task then fails).
  returned: always
  type: bool
  sample: false
spec_changed:
  description: The spec file was (or, in check mode, would be) rewritten.
  returned: always
  type: bool
state:
  description: The O(state) asked for.
  returned: always
  type: str
  sample: converged
report:
  description:
    - The tool's JSON report (in check mode for O(state=stopped) and O(state=rolled_back), the one of
      C(ds4-converge status)). For O(state=converged) - C(ok), C(changed), C(reverted), C(release), C(endpoint), C(error), C(detail), and
      C(roles), one entry per role (preflight, toolchain, models, engine, service, probe) with its C(status),
      C(msg), C(changes), C(warnings) and C(notes). The roles' diffs are left out (diff mode shows them).
  returned: when the tool printed its report
  type: dict
  sample:
    ok: true
    changed: true
    reverted: false
    release: 6f2b8dabb4fb-cpu-nocuda
    endpoint: http://127.0.0.1:8000
    error: null
    detail: null
    roles:
      - {name: engine, status: changed, changed: true, msg: "built v0.2.0 (6f2b8dabb4fb) with make cpu",
         changes: ["build release 6f2b8dabb4fb-cpu-nocuda"], warnings: [], notes: []}
cmd:
  description: The command that ran.
  returned: always
  type: list
  elements: str
rc:
  description: The tool's exit status.
  returned: always
  type: int
  sample: 0
detail:
  description: More about a failure, e.g. the tail of the engine's log.
  returned: failure
  type: str
"""

import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

MEANING = {1: "failed", 2: "invalid spec or usage", 3: "another ds4-converge run holds the lock of this root",
           4: "never converged under this root"}
ARGUMENT_SPEC = dict(
    spec=dict(type="dict"),
    spec_source=dict(type="str", default="spec"),
    path=dict(type="path", default="/etc/ds4-converge/spec.yaml"),
    mode=dict(type="raw", default="0644"),
    overrides=dict(type="list", elements="str", default=[], aliases=["set"]),
    executable=dict(type="path"),
    state=dict(type="str", choices=["converged", "stopped", "rolled_back"], default="converged"),
)
# the tool's command for each state, and the read-only command that predicts it in check mode
COMMAND = {"converged": [], "stopped": ["stop"], "rolled_back": ["rollback"]}


def render_spec(spec):
    """The spec file's text: stable for the same dict, so a second run finds nothing to change."""
    try:
        import yaml
    except ImportError:
        return json.dumps(spec, indent=2, sort_keys=True) + "\n"
    header = "# Written by Ansible (module ds4_converge): edit the play's spec, not this file.\n"
    return header + yaml.safe_dump(spec, sort_keys=True, default_flow_style=False, indent=2)


def read_text(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def write_scratch(directory, path, text, kind):
    """A scratch copy of the new spec beside the real file (relative paths in it resolve the same)."""
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".%s.%s." % (os.path.basename(path), kind), suffix=".yaml")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    return tmp


def find_executable(module):
    if module.params["executable"]:
        return module.params["executable"]
    return module.get_bin_path("ds4-converge", required=True, opt_dirs=["/opt/ds4-converge/bin"])


def run_tool(module, executable, command, spec_path, check=False, diff=False):
    """`ds4-converge [COMMAND] SPEC --json ...` and its one JSON document (None when it printed none)."""
    cmd = [executable] + command + [spec_path, "--json"]
    cmd += ["--check"] if check else []
    cmd += ["--diff"] if diff else []
    for override in module.params["overrides"]:
        cmd += ["--set", override]
    rc, out, err = module.run_command(cmd, environ_update={"NO_COLOR": "1", "TERM": "dumb"})
    try:
        report = json.loads(out) if out.lstrip().startswith("{") else None
    except ValueError:
        report = None
    return cmd, rc, out, err, report


def predict(module, executable, state, spec_path):
    """Check mode for stopped and rolled_back: what `status` (read-only) says the command would do."""
    cmd, rc, out, err, status = run_tool(module, executable, ["status"], spec_path)
    if status is None or rc not in (0, 1, 4):
        return cmd, rc, out, err, status, False
    never = bool(status.get("never_converged"))
    if state == "stopped":
        return cmd, 0, out, err, status, status.get("pid") is not None
    if never:  # rollback fails the same way for real: nothing to roll back to
        return cmd, 4, out, err, status, False
    return cmd, 0, out, err, status, True


def diffs(spec_path, before, after, report):
    found = []
    if after is not None and before != after:
        found.append(dict(before_header=spec_path, after_header=spec_path, before=before or "", after=after))
    # the tool renders its own unified diffs (with their before/after headers): Ansible shows them as they are
    for role in (report or {}).get("roles", []):
        if role.get("diff"):
            found.append(dict(prepared=role["diff"] if role["diff"].endswith("\n") else role["diff"] + "\n"))
    return found


def failure_message(rc, report, err, out, spec_path, shown_path, candidate=None):
    """The tool's reason, one line. `shown_path` is the file the tool read; a scratch copy of a new spec is named
    as `candidate` (what produced it: the file at spec_path does not hold that text), anything else as spec_path."""
    if report is not None and report.get("error"):
        # a log tail sits between the error's first line (what failed) and its last (what the revert did)
        lines = report["error"].strip().splitlines()
        reason = lines[0].strip() + (" … " + lines[-1].strip() if len(lines) > 1 else "")
    else:
        lines = [line.strip() for line in (err or out or "no output").strip().splitlines()] or ["no output"]
        if lines[0].startswith("Traceback"):  # the tool crashed: what it died of is the last line
            reason = "crashed: " + lines[-1]
        else:  # invalid spec, lock held: every line is a problem of its own (file:line:col: field: ...)
            reason = "; ".join(lines[:20])
    message = "ds4-converge exited %d (%s): %s" % (rc, MEANING.get(rc, "unexpected exit"), reason)
    if report is not None and rc not in (2, 3):  # a run that stopped before it began changed nothing
        reverted = str(bool(report.get("reverted"))).lower()
        message += " | reverted: %s | serving: %s" % (reverted, report.get("release") or "nothing")
    if rc == 1:
        message += " | details: ds4-converge logs %s" % spec_path
    if shown_path == spec_path:
        return message
    if candidate is None or rc != 2:  # only an invalid spec's messages point into the new text
        return message.replace(shown_path, spec_path)
    return (message.replace(shown_path, "<new spec from %s>" % candidate)
            + " | not written: %s holds the spec before (the new spec's text: spec_text)" % spec_path)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    state = params["state"]
    spec_path = params["path"]
    directory = os.path.dirname(spec_path) or "."
    executable = find_executable(module)

    before = read_text(spec_path)
    after = render_spec(params["spec"]) if params["spec"] is not None else None
    if after is None and before is None:
        module.fail_json(msg="no spec: give `spec`, or put a spec file at %s" % spec_path)
    spec_changed = after is not None and after != before
    candidate = params["spec_source"] if spec_changed else None  # what the tool reads is not the file at spec_path

    scratch_dir = scratch = made_dir = None
    run_path = spec_path
    predicted = False
    try:
        if module.check_mode and spec_changed:
            # plan against the NEW spec without touching the real file: a scratch copy beside it (so relative
            # paths resolve the same), or in the module's temporary directory when its directory is missing
            if not os.path.isdir(directory):
                scratch_dir = tempfile.mkdtemp(prefix="ds4-converge-check.", dir=module.tmpdir)
            scratch = write_scratch(scratch_dir or directory, spec_path, after, "check")
            run_path = scratch
        elif spec_changed:
            # validated before it replaces the host's spec (atomically: the tool never reads half a spec), so an
            # invalid spec leaves the file, and every command that reads it, as they were
            if not os.path.isdir(directory):
                os.makedirs(directory, mode=0o755)
                made_dir = directory
            scratch = write_scratch(directory, spec_path, after, "new")
            cmd, rc, out, err, report = run_tool(module, executable, ["validate"], scratch)
            if rc != 0:
                invalid = dict(changed=False, spec_changed=False, state=state, rc=rc, release=None, endpoint=None,
                               reverted=False, stderr=err, cmd=[spec_path if part == scratch else part for part in cmd],
                               **(dict(spec_text=after) if rc == 2 else {}))
                module.fail_json(msg=failure_message(rc, report, err, out, spec_path, scratch, candidate), **invalid)
            module.atomic_move(scratch, spec_path)
            scratch = None
        file_args = module.load_file_common_arguments(dict(path=spec_path, mode=params["mode"]))
        attrs_changed = False
        if os.path.exists(spec_path):
            attrs_changed = module.set_fs_attributes_if_different(file_args, False)
        if state == "converged":
            cmd, rc, out, err, report = run_tool(module, executable, [], run_path, check=module.check_mode,
                                                 diff=module._diff)
        elif module.check_mode:
            cmd, rc, out, err, report, predicted = predict(module, executable, state, run_path)
        else:
            cmd, rc, out, err, report = run_tool(module, executable, COMMAND[state], run_path)
    finally:
        if scratch:
            os.unlink(scratch)
        if scratch_dir:
            os.rmdir(scratch_dir)
        if made_dir and not os.path.exists(spec_path):
            os.rmdir(made_dir)

    report = report or None
    if state == "converged":
        tool_changed = bool(report and report.get("changed"))
    elif module.check_mode:
        tool_changed = predicted
    elif state == "stopped":
        tool_changed = bool(report and report.get("stopped"))
    else:
        tool_changed = bool(report and report.get("changed"))
    result = dict(
        changed=spec_changed or attrs_changed or tool_changed,
        spec_changed=spec_changed,
        state=state,
        cmd=[spec_path if part == run_path else part for part in cmd],
        rc=rc,
        release=(report or {}).get("release"),
        endpoint=(report or {}).get("endpoint"),
        front=(report or {}).get("front"),
        reverted=bool((report or {}).get("reverted")),
    )
    if report is not None:
        # the roles' diffs are shown in diff mode (below), not repeated in every result
        result["report"] = dict(report, roles=[dict((k, v) for k, v in role.items() if k != "diff")
                                               for role in report.get("roles", [])])
    if module._diff:
        result["diff"] = diffs(spec_path, before, after, report)
    # status's own "ok" is "healthy": in check mode a stopped or unhealthy box is an answer, not a failure
    succeeded = rc == 0 and report is not None and (bool(report.get("ok")) or module.check_mode)
    if not succeeded:
        result["stderr"] = err
        if report is not None and report.get("detail"):
            result["detail"] = report["detail"]
        if report is None:
            result["stdout"] = out
        if rc == 2 and run_path != spec_path:
            result["spec_text"] = after
        module.fail_json(msg=failure_message(rc, report, err, out, spec_path, run_path, candidate), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
