# -*- coding: utf-8 -*-
# Copyright (c) ds4-converge contributors
# MIT License (see LICENSE at the repository root, or https://opensource.org/licenses/MIT)
# SPDX-License-Identifier: MIT
"""The host's spec file, written the way a task may write it: the new text goes to a scratch file beside the
real one (so relative paths in it resolve the same), is validated there, and only then replaces the file in one
atomic move (the tool never reads half a spec; an invalid spec leaves the file, and every command that reads it,
as they were). Check mode plans against the scratch copy and never touches the file."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import tempfile


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
    """A scratch copy of the new spec in `directory`, named after the real file and what it is for."""
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".%s.%s." % (os.path.basename(path), kind), suffix=".yaml")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    return tmp


class SpecFile(object):
    """The spec file at `path` and the text a task wants in it (`after`; None: the file stays as it is).

    A context manager: whatever it made and did not keep (a scratch file, a scratch directory, the spec's
    directory when no spec landed in it) is removed when the block ends, also when the task fails in it."""

    def __init__(self, module, path, after):
        self.module = module
        self.path = path
        self.directory = os.path.dirname(path) or "."
        self.before = read_text(path)
        self.after = after
        self.changed = after is not None and after != self.before
        self._scratch = self._scratch_dir = self._made_dir = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        if self._scratch:
            os.unlink(self._scratch)
        if self._scratch_dir:
            os.rmdir(self._scratch_dir)
        if self._made_dir and not os.path.exists(self.path):
            os.rmdir(self._made_dir)
        return False

    def scratch_for_check(self):
        """The new text in a scratch file to plan against: beside the file, or in the module's temporary directory
        when the file's directory does not exist (check mode creates nothing)."""
        if not os.path.isdir(self.directory):
            self._scratch_dir = tempfile.mkdtemp(prefix="ds4-converge-check.", dir=self.module.tmpdir)
        self._scratch = write_scratch(self._scratch_dir or self.directory, self.path, self.after, "check")
        return self._scratch

    def install(self, validate):
        """Scratch, validate, atomic move. `validate(scratch_path)` returns None when the text is good, or its
        refusal, which install returns without replacing anything; None once the new text is in place."""
        if not os.path.isdir(self.directory):
            os.makedirs(self.directory, mode=0o755)
            self._made_dir = self.directory
        self._scratch = write_scratch(self.directory, self.path, self.after, "new")
        refusal = validate(self._scratch)
        if refusal is not None:
            return refusal
        self.module.atomic_move(self._scratch, self.path)
        self._scratch = None
        return None

    def set_attributes(self, mode):
        """The file's mode (and the other file arguments) as the task says; whether that changed anything."""
        if not os.path.exists(self.path):
            return False
        file_args = self.module.load_file_common_arguments(dict(path=self.path, mode=mode))
        return self.module.set_fs_attributes_if_different(file_args, False)
