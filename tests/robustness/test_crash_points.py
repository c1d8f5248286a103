"""Every step boundary the code names is documented in core/crashpoints.py (and so killed by a test there): the
ones called by name, and the ones a road names after its steps (service/roads.py, run by orchestrate/drive.py)."""
import re
from pathlib import Path

from ds4_converge.core.crashpoints import POINTS
from ds4_converge.service import roads

PACKAGE = Path(__file__).resolve().parents[2] / "ds4_converge"


def test_every_crash_point_in_the_code_is_documented():
    literal = set()
    for source in PACKAGE.rglob("*.py"):
        literal |= set(re.findall(r'crash_point\("([^"]+)"\)', source.read_text()))
    every_road = [value for value in vars(roads).values() if isinstance(value, roads.Road)]
    on_roads = {point for road in every_road for _, point in road.steps if point}
    assert literal and {"cold start", "held switch", "beside", "revert", "rollback"} <= {r.name for r in every_road}
    named = literal | on_roads
    assert named == set(POINTS), named ^ set(POINTS)
