"""Every step boundary the code names is documented in core/crashpoints.py (and so killed by a test there)."""
import re
from pathlib import Path

from ds4_converge.core.crashpoints import POINTS

PACKAGE = Path(__file__).resolve().parents[2] / "ds4_converge"


def test_every_crash_point_in_the_code_is_documented():
    literal, prefixed, steps = set(), set(), {"revert", "rollback"}  # switch_to's reasons
    for source in PACKAGE.rglob("*.py"):
        text = source.read_text()
        literal |= set(re.findall(r'crash_point\("([^"]+)"\)', text))
        prefixed |= set(re.findall(r'crash_point\(f"\{step\}([^"]+)"\)', text))
        steps |= set(re.findall(r'_install\(ctx, \w+, "([a-z]+)-"\)', text))  # the overlap switch's take-over
    assert literal and prefixed and "beside" in steps
    named = literal | prefixed | {f"{step}-{p}" for step in steps for p in prefixed}
    assert named == set(POINTS), named ^ set(POINTS)
