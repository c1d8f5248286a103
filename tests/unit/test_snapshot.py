"""The one reader of what serves (service/snapshot.py): what it reads from supervisord's answers and the program
files, what it says in words, and that it never raises nor blocks on what it cannot read. supervisord itself is
stood in for by its answers here (getState, getAllProcessInfo as dicts); the slow tests run it for real."""
import os
import xmlrpc.client
from types import SimpleNamespace

import pytest

from ds4_converge.core.layout import Layout
from ds4_converge.core.state import Deployment
from ds4_converge.service import front, snapshot, switch
from ds4_converge.service.supervisor import GUARD, WATCHDOG, Supervisor, SupervisorError

NAME = "ds4"


class Answers:
    """A supervisord's answers: up or not, its programs' getProcessInfo, or an error for every question."""

    def __init__(self, programs=(), *, up=True, raises=None):
        self.programs, self.up, self.raises, self.settles = list(programs), up, raises, []

    def is_running(self, settle=30):
        self.settles.append(settle)
        if self.raises is not None:
            raise self.raises
        return self.up

    def all_processes(self):
        return [dict(p) for p in self.programs]

    def leftovers(self):
        return [] if self.up else [4321]


def info(name, state="RUNNING", pid=100, start=1000, now=1060, **more):
    return {"name": name, "statename": state, "pid": pid if state in ("RUNNING", "STARTING") else 0,
            "start": start, "now": now, "stdout_logfile": f"/logs/{name}.log", **more}


def deployment(release, port=8000):
    return Deployment(release=release, program_conf=f"; ds4-server for release {release}\n", command=["env"],
                      endpoint=f"http://127.0.0.1:{port}")


def state(current=None, last_good=None):
    return SimpleNamespace(current=current, last_good=last_good)


def spec(front_on=False):
    return SimpleNamespace(server=SimpleNamespace(name=NAME), front=object() if front_on else None)


def write_program(layout, name, release):
    layout.program_dir.mkdir(parents=True, exist_ok=True)
    layout.program_conf(name).write_text(f"[program:{name}]\n; ds4-server for release {release} (sealed)\n"
                                         f"command=/usr/bin/env ds4-server --port 8000\n")


def test_a_root_never_converged_reads_as_nothing_running_without_raising(tmp_path):
    layout = Layout(tmp_path / "root")  # not even the root exists
    now = snapshot.read(layout, Supervisor(layout), spec(front_on=True), None)
    assert not now.supervisord and now.unknown is None and now.leftovers == ()
    assert now.engine.state is None and now.engine.pid is None and not now.engine.serves
    assert now.points_at is None and now.front_servers is None  # no admin socket: nothing to ask
    assert now.release() is None and now.endpoint() is None
    assert now.state_words() == "not running" and now.serving_words() == "nothing"


def test_the_programs_of_this_root_their_pids_uptime_and_the_release_each_program_file_names(tmp_path):
    layout = Layout(tmp_path)
    write_program(layout, NAME, "r2")
    write_program(layout, NAME + ".next", "r3")
    answers = Answers([info(NAME, pid=111), info(NAME + ".next", "STARTING", pid=222),
                       info(snapshot.FRONT, pid=333), info(GUARD, pid=444), info(WATCHDOG, "EXITED"),
                       info("someone-else", pid=999)])
    current, last_good = deployment("r2"), deployment("r1")
    now = snapshot.read(layout, answers, spec(), state(current, last_good))
    assert answers.settles == [snapshot.SETTLE_S]  # bounded: a reloading supervisord is waited for 5 s at most
    assert set(now.programs) == {NAME, NAME + ".next", snapshot.FRONT, GUARD, WATCHDOG}  # only this root's
    assert (now.engine.state, now.engine.pid, now.engine.uptime_s, now.engine.release) == ("RUNNING", 111, 60, "r2")
    assert (now.candidate.state, now.candidate.pid, now.candidate.release) == ("STARTING", 222, "r3")
    assert now.front.pid == 333 and now.guard.pid == 444 and now.front.release is None
    assert now.watchdog.state == "EXITED" and now.watchdog.pid is None and not now.watchdog.serves
    assert now.engine.log == f"/logs/{NAME}.log" and "ds4-server --port 8000" in now.engine.conf
    assert now.current is current and now.last_good is last_good
    assert now.release() == "r2" and now.endpoint() == "http://127.0.0.1:8000"
    assert now.serving_words() == f"{NAME} (pid 111) on release r2"
    assert "ds4-server --port" not in repr(now), "a program file's text (its secrets) is never printed"


def test_the_words_of_what_serves_are_those_of_a_failure_report(tmp_path):
    layout = Layout(tmp_path)
    starting = snapshot.read(layout, Answers([info(NAME, "STARTING", pid=7)]), spec(), None)
    assert starting.serving_words() == f"{NAME} (pid 7, starting) on release unknown"  # no program file
    stopped = snapshot.read(layout, Answers([info(NAME, "STOPPED")]), spec(), state(deployment("r1")))
    assert stopped.serving_words() == "nothing" and stopped.state_words() == "STOPPED"
    assert stopped.release() is None, "state.json's current counts only while its engine runs"
    fatal = snapshot.read(layout, Answers([info(NAME, "FATAL")]), spec(), None)
    assert fatal.serving_words() == "nothing" and fatal.state_words() == "FATAL"


@pytest.mark.parametrize("error", [SupervisorError("supervisord on /x does not answer getState: timed out"),
                                   PermissionError(13, "Permission denied", "/root/run/supervisor.sock"),
                                   xmlrpc.client.ProtocolError("/RPC2", 500, "boom", {})])
def test_a_supervisord_that_cannot_be_asked_is_unknown_with_its_words_never_an_exception(tmp_path, error):
    now = snapshot.read(Layout(tmp_path), Answers(raises=error), spec(), state(deployment("r1")))
    assert now.unknown and now.error is error and not now.supervisord
    assert now.state_words() == "unknown" and now.release() is None
    assert now.serving_words() == f"unknown (supervisord: {error})"
    assert now.current.release == "r1", "what the root started last is still known"


def test_a_supervisord_that_is_down_names_what_it_left_running(tmp_path):
    now = snapshot.read(Layout(tmp_path), Answers(up=False), spec(), None)
    assert not now.supervisord and now.unknown is None and now.leftovers == (4321,)
    up = snapshot.read(Layout(tmp_path), Answers(), spec(), None)
    assert up.leftovers == ()


def test_a_program_file_that_is_a_fifo_is_not_waited_on(tmp_path):
    layout = Layout(tmp_path)
    layout.program_dir.mkdir(parents=True)
    os.mkfifo(layout.program_conf(NAME))
    now = snapshot.read(layout, Answers([info(NAME)]), spec(), None)  # a blocking open would hang here
    assert now.engine.release is None and now.engine.conf is None
    assert now.serving_words() == f"{NAME} (pid 100) on release unknown"


def test_the_front_door_slot_pointed_at_and_the_slot_of_a_port():
    servers = {"a": {"port": 8001, "up": False}, "b": {"port": 8002, "up": True},
               "hold": {"port": 8009, "up": True}}
    now = snapshot.Snapshot(NAME, supervisord=True, front_servers=servers)
    assert now.points_at == 8002 and now.slot_of(8001) == "a" and now.slot_of(8009) is None
    assert now.slot_of(None) is None and now.slot_of(1) is None
    held = snapshot.Snapshot(NAME, front_servers={**servers, "b": {"port": 8002, "up": False}})
    assert held.points_at is None, "every request held: the front door points at no engine"


def test_a_front_door_whose_admin_socket_does_not_answer_is_a_problem_in_words(tmp_path):
    layout = Layout(tmp_path)
    front.admin_socket(layout).parent.mkdir(parents=True)
    front.admin_socket(layout).write_text("")  # a socket path nothing listens on
    now = snapshot.read(layout, Answers(), spec(front_on=True), None)
    assert now.front_servers is None and now.points_at is None and "admin socket" in now.front_problem
    assert snapshot.read_named(layout, Answers(), NAME).front_problem  # the watchdog: asked where a socket is
    assert snapshot.read(layout, Answers(), spec(), None).front_problem is None  # no front in the spec


def test_the_names_it_keeps_are_those_of_the_modules_that_own_them():
    # snapshot.py does not import front.py or switch.py (the watchdog's look stays lean): their names agree
    assert snapshot.FRONT == front.PROGRAM and snapshot.HOLD == front.HOLD
    assert snapshot.CANDIDATE_SUFFIX == switch.CANDIDATE_SUFFIX


def test_an_unknown_snapshot_made_without_asking_again():
    now = snapshot.unknown(NAME, "supervisord did not answer", state=state(deployment("r1")))
    assert now.state_words() == "unknown" and now.serving_words() == "unknown (supervisord: supervisord did not answer)"
    assert now.current.release == "r1" and now.standing() == "unknown"


STOP = {"command": "stop", "ok": True, "finished_at": "2026-12-03T18:00:00+00:00"}


@pytest.mark.parametrize("answers, recorded, last_run, expected", [
    (Answers(raises=SupervisorError("no answer")), state(), None, "unknown"),
    (Answers(up=False), state(), STOP, "never"),  # never converged, even after a stop
    (Answers([info(NAME, "STARTING", pid=5)]), state(deployment("r1")), None, "serves"),
    (Answers([info(NAME)]), state(), None, "down"),  # runs, but state.json names nothing: not what we started
    (Answers(up=False), state(deployment("r1"), deployment("r1")), STOP, "unsupervised"),  # left by a dead supervisord
    (Answers([info(NAME, "STOPPED")]), state(None, deployment("r1")), STOP, "stopped"),
    (Answers([info(NAME, "STOPPED")]), state(None, deployment("r1")), {**STOP, "ok": False}, "down"),
    (Answers([info(NAME, "FATAL")]), state(deployment("r1")), {**STOP, "command": "converge"}, "down"),
])
def test_what_status_says_of_a_root_before_it_asks_the_engine(tmp_path, answers, recorded, last_run, expected):
    assert snapshot.read(Layout(tmp_path), answers, spec(), recorded).standing(last_run) == expected
