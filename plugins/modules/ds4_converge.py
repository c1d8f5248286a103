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

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ds4.converge.plugins.module_utils.cli_runner import CliRunner, failure_message, find_executable
from ansible_collections.ds4.converge.plugins.module_utils.spec_file import SpecFile, render_spec

ARGUMENT_SPEC = dict(
    spec=dict(type="dict"),
    spec_source=dict(type="str", default="spec"),
    path=dict(type="path", default="/etc/ds4-converge/spec.yaml"),
    mode=dict(type="raw", default="0644"),
    overrides=dict(type="list", elements="str", default=[], aliases=["set"]),
    executable=dict(type="path"),
    state=dict(type="str", choices=["converged", "stopped", "rolled_back"], default="converged"),
)


def converged(module, runner, path):
    """`ds4-converge PATH` (with --check and --diff as the task runs); changed as the report says."""
    run = runner([], path, check=module.check_mode, diff=module._diff)
    return run, bool(run.report and run.report.get("changed"))


def stopped(module, runner, path):
    """`ds4-converge stop PATH`; changed when something ran."""
    if module.check_mode:
        return predict(runner, "stopped", path)
    run = runner(["stop"], path)
    return run, bool(run.report and run.report.get("stopped"))


def rolled_back(module, runner, path):
    """`ds4-converge rollback PATH`: an action, changed whenever it rolled back."""
    if module.check_mode:
        return predict(runner, "rolled_back", path)
    run = runner(["rollback"], path)
    return run, bool(run.report and run.report.get("changed"))


STATES = {"converged": converged, "stopped": stopped, "rolled_back": rolled_back}


def predict(runner, state, path):
    """Check mode for stopped and rolled_back: what `status` (read-only) says the command would do."""
    run = runner(["status"], path)
    status = run.report
    if status is None or run.rc not in (0, 1, 4):
        return run, False
    if state == "stopped":
        return run._replace(rc=0), status.get("pid") is not None
    if status.get("never_converged"):  # rollback fails the same way for real: nothing to roll back to
        return run._replace(rc=4), False
    return run._replace(rc=0), True


def spec_to_run(module, runner, spec_file):
    """The spec file the tool reads: a scratch copy of a new spec in check mode, else the real file - replaced by
    a new spec once `ds4-converge validate` accepts it (an invalid one fails the task here, nothing replaced)."""
    if not spec_file.changed:
        return spec_file.path
    if module.check_mode:
        return spec_file.scratch_for_check()

    def refusal(scratch):
        run = runner(["validate"], scratch)
        return (run, scratch) if run.rc != 0 else None

    refused = spec_file.install(refusal)
    if refused is not None:
        refused, scratch = refused
        invalid = dict(changed=False, spec_changed=False, state=module.params["state"], rc=refused.rc, release=None,
                       endpoint=None, reverted=False, stderr=refused.err,
                       cmd=[spec_file.path if part == scratch else part for part in refused.cmd],
                       **(dict(spec_text=spec_file.after) if refused.rc == 2 else {}))
        module.fail_json(msg=failure_message(refused, spec_file.path, scratch, module.params["spec_source"]),
                         **invalid)
    return spec_file.path


def diffs(spec_file, report):
    found = []
    if spec_file.after is not None and spec_file.before != spec_file.after:
        found.append(dict(before_header=spec_file.path, after_header=spec_file.path, before=spec_file.before or "",
                          after=spec_file.after))
    # the tool renders its own unified diffs (with their before/after headers): Ansible shows them as they are
    for role in (report or {}).get("roles", []):
        if role.get("diff"):
            found.append(dict(prepared=role["diff"] if role["diff"].endswith("\n") else role["diff"] + "\n"))
    return found


def finish(module, spec_file, run, run_path, changed):
    """The task's result from the tool's run, and whether it failed."""
    report = run.report
    result = dict(changed=changed, spec_changed=spec_file.changed, state=module.params["state"],
                  cmd=[spec_file.path if part == run_path else part for part in run.cmd], rc=run.rc,
                  release=(report or {}).get("release"), endpoint=(report or {}).get("endpoint"),
                  front=(report or {}).get("front"), reverted=bool((report or {}).get("reverted")))
    if report is not None:
        # the roles' diffs are shown in diff mode (below), not repeated in every result
        result["report"] = dict(report, roles=[dict((k, v) for k, v in role.items() if k != "diff")
                                               for role in report.get("roles", [])])
    if module._diff:
        result["diff"] = diffs(spec_file, report)
    # status's own "ok" is "healthy": in check mode a stopped or unhealthy box is an answer, not a failure
    if run.rc == 0 and report is not None and (bool(report.get("ok")) or module.check_mode):
        module.exit_json(**result)
    result["stderr"] = run.err
    if report is not None and report.get("detail"):
        result["detail"] = report["detail"]
    if report is None:
        result["stdout"] = run.out
    if run.rc == 2 and run_path != spec_file.path:
        result["spec_text"] = spec_file.after
    candidate = module.params["spec_source"] if spec_file.changed else None  # the tool read the new text
    module.fail_json(msg=failure_message(run, spec_file.path, run_path, candidate), **result)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    runner = CliRunner(module, find_executable(module), params["overrides"])
    after = render_spec(params["spec"]) if params["spec"] is not None else None
    with SpecFile(module, params["path"], after) as spec_file:
        if after is None and spec_file.before is None:
            module.fail_json(msg="no spec: give `spec`, or put a spec file at %s" % spec_file.path)
        run_path = spec_to_run(module, runner, spec_file)
        attributes_changed = spec_file.set_attributes(params["mode"])
        run, tool_changed = STATES[params["state"]](module, runner, run_path)
    finish(module, spec_file, run, run_path, spec_file.changed or attributes_changed or tool_changed)


if __name__ == "__main__":
    main()
