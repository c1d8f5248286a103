"""The road chooser and front.overlap's answers as a table of cases (tests/unit/roads/choose.yaml), one
parametrized test, in the style of pyinfra's tests/operations/*/*.json; and the roads as data: each is a
sequence of named steps the one executor knows, ending at the crash points the crash tests kill a run at."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ds4_converge.core.crashpoints import POINTS
from ds4_converge.orchestrate.drive import STEPS
from ds4_converge.service import roads

CASES = yaml.safe_load((Path(__file__).parent / "roads" / "choose.yaml").read_text())
PROGRAM = {"same": "[program:ds4] ; on disk\n", "other": "[program:ds4] ; rendered anew\n", None: None}


@pytest.mark.parametrize("case", CASES, ids=[c["case"] for c in CASES])
def test_the_road_chooser(case):
    given = dict(case["in"])
    given["current"], given["desired"] = PROGRAM[given["current"]], PROGRAM[given["desired"]]
    choice = roads.choose(roads.Inputs(**given))
    assert {"road": choice.road.name if choice.road else None, "change": choice.change, "beside": choice.beside,
            "why": choice.why} == case["out"]


def test_the_table_covers_every_road_and_every_answer_of_front_overlap():
    made = [roads.choose(roads.Inputs(**{**c["in"], "current": PROGRAM[c["in"]["current"]],
                                         "desired": PROGRAM[c["in"]["desired"]]})) for c in CASES]
    assert {c.road.name for c in made if c.road} == {"cold start", "restart in place", "held switch", "beside"}
    assert {c.why for c in made if c.why} == {"front.overlap is off", "a distributed part", "last good does not serve",
                                              "the memory budget is not known yet", roads.NO_ROOM,
                                              "memory holds both engines"}


ROADS = [roads.COLD_START, roads.IN_PLACE, roads.HELD, roads.BESIDE, roads.REVERT, roads.REVERT_BESIDE,
         roads.ROLLBACK, roads.ADOPT]


@pytest.mark.parametrize("road", ROADS, ids=[r.name for r in ROADS])
def test_every_step_of_a_road_is_one_the_executor_runs_and_every_crash_point_is_known(road):
    assert [s for s in road.names if s != roads.PROBE and s not in STEPS] == []
    assert [p for _, p in road.steps if p is not None and p not in POINTS] == []
    assert road.words().startswith(f"{road.name}: ")


def test_the_crash_points_of_a_switch_are_all_on_its_roads():
    on_roads = {p for road in ROADS for _, p in road.steps if p}
    switch_points = {p for p in POINTS if p not in ("started", "model-partial", "models-placed", "build-exported",
                                                    "build-made", "release-built", "supervisord-conf", "probed",
                                                    "held-flipped")}
    assert switch_points <= on_roads
