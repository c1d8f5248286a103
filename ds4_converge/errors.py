"""The one base of every error the tool reports: a message for people, and a detail for whoever digs further.

It lives at the top of the package, below every folder, so that the spec and the facts (which depend on nothing
else of the package) can derive their errors from it too.
"""
from __future__ import annotations


class Ds4Error(Exception):
    """`str(error)` is one line for people; `detail` is what explains it (a log tail, a command's stderr)."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.message = message
        self.detail = detail
