"""The supervisord of this root, as the roles ask it through the Context: which programs run, with which pid,
and loading, starting and stopping them. The service role owns it (:class:`ds4_converge.service.supervisor.
Supervisor`, over XML-RPC); the ground names only what is asked of it."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class Supervision(Protocol):
    def is_running(self, settle: float = 30) -> bool:
        """supervisord answers (waiting up to `settle` seconds for one that is still starting)."""

    def info(self, name: str) -> dict | None:
        """The program's process info (state name, pid …); None: no such program."""

    def running_pid(self, name: str, *, starting: bool = False) -> int | None: ...

    def owns(self, pids: Iterable[int]) -> set[int]:
        """Those pids that are (or descend from) a program this supervisord runs."""

    def leftovers(self) -> list[int]:
        """Engines of this root's releases still running without their supervisord."""

    def front_leftovers(self) -> list[int]: ...

    def start_daemon(self, timeout: float = 30) -> None: ...

    def wait_ready(self, timeout: float = 30) -> None: ...

    def load(self, name: str) -> None: ...

    def apply_program(self, name: str, *, wait_running: bool = False, timeout: float = 10) -> None: ...

    def await_autostart(self, name: str, timeout: float = 10) -> None: ...

    def stop(self, name: str, grace: float) -> None: ...

    def remove(self, name: str) -> None: ...
