"""molecule/haproxy: a rolling upgrade behind a real HAProxy with zero failed requests (tests/fleet/test_molecule.py
says how the scenarios run; each has a file of its own so that two test workers can run two at once)."""
from __future__ import annotations

import pytest

from molecule_support import PYTESTMARK, SCENARIO_TIMEOUT_S, run_scenario, scratch_dir

pytestmark = PYTESTMARK


@pytest.mark.timeout(SCENARIO_TIMEOUT_S + 120)
def test_molecule_haproxy_scenario():
    """The HAProxy scenario, run like the others (molecule_support.run_scenario)."""
    with scratch_dir() as scratch:
        run_scenario("haproxy", scratch)
