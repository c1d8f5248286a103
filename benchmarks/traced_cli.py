"""`ds4-converge ARGS…` with a timeline: the run's step boundaries and its calls to supervisord, each with the
system-wide monotonic clock, one JSON line each in the file $DS4C_BENCH_TRACE (serving_gap.py reads it).

Nothing of the tool is changed: its crash points (the step boundaries of a switch, ds4_converge's crashpoints
module, which does nothing unless a test asks it to crash) and xmlrpc.client's method calls are wrapped before
the tool imports them, so the run does exactly what `ds4-converge ARGS…` does, plus a write per event.
"""
from __future__ import annotations

import functools
import importlib
import json
import os
import sys
import time
import xmlrpc.client
from pathlib import Path

TRACE = open(os.environ["DS4C_BENCH_TRACE"], "a", buffering=1)  # noqa: SIM115 - open for the whole run


def mark(event: str, **fields) -> None:
    TRACE.write(json.dumps({"t": time.monotonic(), "event": event, **fields}) + "\n")


def _module(filename: str) -> object:
    """The package's module of that file name, wherever the package keeps it."""
    import ds4_converge

    package = Path(ds4_converge.__file__).parent
    (path,) = [p for p in package.rglob(filename) if "__pycache__" not in p.parts]
    return importlib.import_module(".".join(("ds4_converge", *path.relative_to(package).with_suffix("").parts)))


_call = xmlrpc.client._Method.__call__


def _traced_call(self, *args):
    name = self._Method__name
    mark("rpc", name=name, phase="begin", args=[a for a in args if isinstance(a, str)])
    try:
        return _call(self, *args)
    finally:
        mark("rpc", name=name, phase="end")


def _traced(function, event: str):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        mark(event, phase="begin", point=args[0] if args and isinstance(args[0], str) else None)
        try:
            return function(*args, **kwargs)
        finally:
            mark(event, phase="end")
    return wrapper


def install() -> None:
    xmlrpc.client._Method.__call__ = _traced_call
    crashpoints = _module("crashpoints.py")  # before any role imports crash_point by name
    crashpoints.crash_point = _traced(crashpoints.crash_point, "point")
    drain = _module("drain.py")  # called as drain.wait_idle(): the module attribute is what runs
    drain.wait_idle = _traced(drain.wait_idle, "drain")


if __name__ == "__main__":
    install()
    from ds4_converge.cli.main import main

    mark("main", phase="begin")
    code = main(sys.argv[1:])
    mark("main", phase="end")
    sys.exit(code)
