# -*- coding: utf-8 -*-
# Copyright (c) ds4-converge contributors
# MIT License (see LICENSE at the repository root, or https://opensource.org/licenses/MIT)
# SPDX-License-Identifier: MIT
"""The ds4-converge command line, run from a module: `ds4-converge [COMMAND] SPEC --json [--check] [--diff]
[--set KEY=VALUE ...]`, its one JSON document, and what its exit status means.

In the manner of community.general's cmd_runner: each option of a run has a format that turns its value into the
command line's words, so a module says what it wants (check, diff, overrides) and never assembles argv itself.
The module talks to the tool only through this (the CLI contract in the project README), never through its Python
package.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
from collections import namedtuple

# the tool's exit statuses, in the words a failed task says them
MEANING = {1: "failed", 2: "invalid spec or usage", 3: "another ds4-converge run holds the lock of this root",
           4: "never converged under this root"}
NO_COLOUR = {"NO_COLOR": "1", "TERM": "dumb"}


def as_flag(flag):
    return lambda on: [flag] if on else []


def as_repeated(option):
    return lambda values: [word for value in values for word in (option, value)]


# the order the words follow SPEC --json on the command line
FORMATS = (("check", as_flag("--check")), ("diff", as_flag("--diff")), ("overrides", as_repeated("--set")))

# what one run gave back: the command (argv), its exit status, stdout, stderr and the JSON report (None: none)
ToolRun = namedtuple("ToolRun", "cmd rc out err report")


def find_executable(module):
    """The `ds4-converge` the module was told to use, or the one on PATH, or in /opt/ds4-converge/bin."""
    if module.params["executable"]:
        return module.params["executable"]
    return module.get_bin_path("ds4-converge", required=True, opt_dirs=["/opt/ds4-converge/bin"])


class CliRunner(object):
    """Runs the tool for a module: `runner(["stop"], path, check=True)`; overrides are the task's, on every run."""

    def __init__(self, module, executable, overrides=()):
        self.module = module
        self.executable = executable
        self.overrides = list(overrides)

    def command(self, words, spec_path, **options):
        options.setdefault("overrides", self.overrides)
        cmd = [self.executable] + list(words) + [spec_path, "--json"]
        for name, format_ in FORMATS:
            cmd += format_(options.get(name))
        return cmd

    def __call__(self, words, spec_path, check=False, diff=False):
        cmd = self.command(words, spec_path, check=check, diff=diff)
        rc, out, err = self.module.run_command(cmd, environ_update=dict(NO_COLOUR))
        return ToolRun(cmd, rc, out, err, parse_report(out))


def parse_report(out):
    """The one JSON document `--json` printed, or None when it printed none (a crash, a usage error)."""
    try:
        return (json.loads(out) if out.lstrip().startswith("{") else None) or None
    except ValueError:
        return None


def first_reason(report, err, out):
    """What the tool said went wrong, on one line."""
    if report is not None and report.get("error"):
        # a log tail sits between the error's first line (what failed) and its last (what the revert did)
        lines = report["error"].strip().splitlines()
        return lines[0].strip() + (" … " + lines[-1].strip() if len(lines) > 1 else "")
    lines = [line.strip() for line in (err or out or "no output").strip().splitlines()] or ["no output"]
    if lines[0].startswith("Traceback"):  # the tool crashed: what it died of is the last line
        return "crashed: " + lines[-1]
    # invalid spec, lock held: every line is a problem of its own (file:line:col: field: ...)
    return "; ".join(lines[:20])


def failure_message(run, spec_path, shown_path, candidate=None):
    """The tool's reason, one line. `shown_path` is the file the tool read; a scratch copy of a new spec is named
    as `candidate` (what produced it: the file at spec_path does not hold that text), anything else as spec_path."""
    rc, report = run.rc, run.report
    message = "ds4-converge exited %d (%s): %s" % (rc, MEANING.get(rc, "unexpected exit"),
                                                   first_reason(report, run.err, run.out))
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
