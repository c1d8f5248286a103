"""SIGINT and SIGTERM mean the same thing: stop, and leave the box serving.

SIGTERM is what systemd and Ansible's timeouts send; Python's default kills the process on the spot, which
after the old engine was stopped would leave nothing serving. Here both raise :class:`Interrupted`, a
``KeyboardInterrupt``, so every place that reverts on Ctrl-C reverts on SIGTERM too. Only the first signal
interrupts: later ones are noted and ignored, so that a second Ctrl-C cannot cut a revert short (SIGKILL
still can), and inside :func:`shielded` a signal is noted without interrupting at all.
"""
from __future__ import annotations

import contextlib
import os
import signal

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _State:
    received: int | None = None  # the first signal of this run
    shield_depth = 0
    previous: dict = {}


def received() -> int | None:
    """The first SIGINT/SIGTERM this run got (None: none)."""
    return _State.received


def _handler(signum, frame) -> None:
    if _State.received is not None or _State.shield_depth:
        _State.received = _State.received or signum
        why = "putting the serving engine back first" if _State.shield_depth else "already stopping"
        os.write(2, f"ds4-converge: {signal.Signals(signum).name}: {why} (SIGKILL stops it at once)\n".encode())
        return
    _State.received = signum
    raise Interrupted(signum)


def install() -> None:
    """Route SIGINT and SIGTERM through :class:`Interrupted` (main thread only; undone by :func:`restore`)."""
    _State.received, _State.shield_depth = None, 0
    for signum in SIGNALS:
        _State.previous[signum] = signal.signal(signum, _handler)


def restore() -> None:
    for signum, previous in _State.previous.items():
        signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
    _State.previous = {}


@contextlib.contextmanager
def shielded():
    """A step that must finish once begun (putting last good back): signals inside are noted, not raised."""
    _State.shield_depth += 1
    try:
        yield
    finally:
        _State.shield_depth -= 1


def exit_code(signum: int) -> int:
    """The shell's convention: 128 + the signal number (130 for SIGINT, 143 for SIGTERM)."""
    return 128 + signum

