"""A ds4 distributed worker's health: it has no HTTP API, so not /v1/models but its own log and its data port.

What the worker writes (`dist_run_worker()` in ds4_distributed.c, b030961), each line on stderr:
- once loaded, with its data listener bound: `distributed worker: layers 22:output model_id=0
  data_listen=HOST:PORT connecting to coordinator HOST:PORT`;
- while the coordinator is not there, about every 6.1 s (200 connects 25 ms apart, then 1 s):
  `distributed worker: unable to connect to HOST:PORT: Connection refused; retrying`;
- `distributed worker: connected to coordinator HOST:PORT`, and when it goes away
  `distributed worker: coordinator disconnected[ after error]; reconnecting` (the worker keeps running).
A worker is *up* once it wrote its first line and accepts on its data port; *connected* while the last of the
connection lines says so. Workers start before their coordinator, so a worker's own converge waits for *up*;
the deployment (playbooks/distributed.yml) asks for *connected* once the coordinator serves.

Its rungs (health/rungs.py): up (or connected) within health.deadline_s, then a soak in which its pid stays the same.
"""
from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from functools import partial
from typing import Callable

from ds4_converge.health.rungs import Clock, EngineWatch, NotReady, Rung, Unhealthy, alive, climb
from ds4_converge.spec.model import Address

STARTED = re.compile(r"distributed worker: layers (?P<layers>\S+) model_id=\S+ data_listen=(?P<listen>\S+) "
                     r"connecting to coordinator (?P<coordinator>\S+)")
CONNECTION = re.compile(r"distributed worker: (?:(?P<connected>connected to coordinator \S+)"
                        r"|(?P<retrying>unable to connect to .*; retrying)"
                        r"|(?P<lost>coordinator disconnected.*; reconnecting))")
#: every start prints its memory plan before the worker's first line (ds4_server.c, CPU and CUDA alike): a
#: worker that supervisord restarted is loading again from here, whatever its previous start said
LOADING = re.compile(r"\bds4: memory: KV ")
ANY_HOST = {"0.0.0.0", "*", "::", ""}
POLL_S = 0.1


@dataclass(frozen=True)
class WorkerState:
    started: bool  # loaded, data listener bound, reaching for the coordinator
    connected: bool
    line: str  # the last line that said so ("" before the first)

    def describe(self) -> str:
        if not self.started:
            return "not started yet (loading)" + (f": {self.line}" if self.line else "")
        return ("connected to its coordinator" if self.connected else "not connected to its coordinator") + (
            f" ({self.line})" if self.line else "")

    def to_json(self) -> dict:
        return {"started": self.started, "connected": self.connected, "line": self.line}


def listen_of(command: list[str], role: str = "worker") -> Address | None:
    """The --listen address of a distributed command line in this role (`--role worker … --listen HOST PORT`: a
    worker's data port; `--role coordinator`: where its workers connect); None: not that role.

    A revert or rollback starts a recorded deployment, which may be a worker when the spec now says
    coordinator (or the other way round): its probe follows the command that runs, not the spec."""
    if "--role" not in command or command[command.index("--role") + 1:][:1] != [role]:
        return None
    at = command.index("--listen") if "--listen" in command else -1
    if at < 0 or len(command) < at + 3 or not command[at + 2].isdigit():
        return None
    return Address(host=command[at + 1], port=int(command[at + 2]))


def read_state(log_text: str) -> WorkerState:
    """What a worker's log says about it now (its last start: a restart by supervisord appends to the same log)."""
    started, connected, line = False, False, ""
    for text in log_text.splitlines():
        if LOADING.search(text):
            started, connected, line = False, False, ""
            continue
        if STARTED.search(text):
            started, connected, line = True, False, text.strip()
            continue
        match = CONNECTION.search(text)
        if match:
            started, connected, line = True, bool(match.group("connected")), text.strip()
    return WorkerState(started, connected, line)


def data_port_open(listen: Address, timeout: float = 1.0) -> bool:
    """The worker accepts on its data port (an empty connection: its data thread reads EOF and closes)."""
    host = "127.0.0.1" if listen.host in ANY_HOST else listen.host
    try:
        with socket.create_connection((host, listen.port), timeout=timeout):
            return True
    except OSError:
        return False


def observe(log_text: str, listen: Address) -> WorkerState:
    """The worker now: its log and its data port together; one judgement for the probe, `status` and the fleet.

    A log alone can be stale: a worker that supervisord restarts after a crash appends to the same log, and until
    the new process prints its first lines the last one still says "connected" (on the H200 status said
    connected while the new process loaded and nothing accepted on the data port). The data listener accepts for
    as long as a loaded worker runs, connected or not (ds4_distributed.c), and binds only after the load: a worker
    whose port refuses is loading, or gone, whatever its log said last."""
    state = read_state(log_text)
    if state.started and not data_port_open(listen):
        return WorkerState(False, False, f"nothing accepts on its data port {listen}; its log's last word: "
                                         f"{state.line}")
    return state


def judge(state: WorkerState) -> str | None:
    """None when an observed worker is healthy (loaded and accepting), else why not."""
    if state.started:
        return None
    return state.line or "its log never said it was loaded"


@dataclass
class Worker:
    """What a worker's rungs ask about: the worker of this start, its log and its data port."""

    watch: EngineWatch
    log_text: Callable[[], str]  # this start's log lines
    listen: Address
    connected: bool  # wait for its coordinator too, not only for it to be up
    pid: int | None = None  # the pid that came up: the one the soak watches


def ladder(worker: Worker) -> list[Rung]:
    """The rungs a worker climbs, in order (the soak follows)."""
    word = "connected" if worker.connected else "up"
    return [Rung(word, partial(up, worker), waits=True, late=partial(_late, worker, word))]


def pause(why: NotReady | None) -> float:
    """A worker not up yet is looked at again soon; one up and soaking, every half second."""
    return POLL_S if why is not None else POLL_S * 5


def wait_worker(watch: EngineWatch, log_text, listen: Address, *, deadline_s: float, soak_s: float,
                connected: bool = False) -> tuple[int, WorkerState]:
    """Wait until the worker is up (and connected, when asked), then that it stays alive for soak_s.

    log_text(): this start's log lines. Raises Unhealthy saying how it failed, with the worker's last lines."""
    worker = Worker(watch, log_text, listen, connected)
    climb(ladder(worker), Clock(deadline_s, pause))
    climb([Rung("soak", partial(stays, worker), holds=True)], Clock(soak_s, pause))
    return worker.pid, read_state(log_text())


def up(worker: Worker, clock: Clock) -> None:
    """Alive, loaded and accepting on its data port (connected, when asked), and counted as started by supervisord."""
    pid = alive(worker.watch)
    state = observe(worker.log_text(), worker.listen)
    problem = judge(state)
    if problem is None and worker.watch.state()[0] == "RUNNING" and (state.connected or not worker.connected):
        worker.pid = pid
        return
    raise NotReady(problem or state.describe())


def _late(worker: Worker, word: str, exc: NotReady, clock: Clock) -> Unhealthy:
    return Unhealthy(f"worker not {word} within {clock.deadline_s:.0f}s: {exc}", worker.watch.last_lines())


def stays(worker: Worker, clock: Clock) -> None:
    """Still the process that came up (supervisord restarts a worker that died: a new pid)."""
    now = alive(worker.watch)
    if now != worker.pid:
        raise Unhealthy(f"worker restarted during the {clock.deadline_s:.0f}s soak (pid {worker.pid} → {now})",
                        worker.watch.last_lines())
