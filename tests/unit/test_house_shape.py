"""The house holds the shape issue 37 gave it, measured by tests/house.py from the source, type-only and
in-function imports counted (`python -m tests.house` prints the same measures)."""
import pytest

from tests import house


@pytest.fixture(scope="module")
def graph():
    return house.graph()


def test_core_names_nothing_of_a_role_the_orchestration_or_the_cli(graph):
    assert house.core_reaches_up(graph) == []


def test_no_import_circle_anywhere(graph):
    assert house.circles(graph) == []


def test_the_role_packages_use_each_other_one_way_only(graph):
    assert house.two_way_pairs(graph) == []


def test_the_context_is_only_context():
    fields, untyped = house.context_fields()
    assert len(fields) <= 27, fields
    assert untyped == []
    # what a switch knows is the Switch's (service/switch.py), never the Context's
    assert not {"switched", "start", "drained", "verdict", "candidate", "gate_baseline"} & set(fields)
    assert "memory" in fields and not {"memory_short", "memory_estimate", "memory_room"} & set(fields)


def test_no_function_over_60_lines():
    assert [f"{f.lines} {f.where}" for f in house.functions() if f.lines > 60] == []


def test_health_imports_nothing_of_the_service(graph):
    assert [f"{a} -> {b}" for a, targets in graph.items() if house.package_of(a) == "health"
            for b in targets if house.package_of(b) == "service"] == []


def test_the_measures_can_fail():
    """The measures see what they look for: a made-up circle, a two-way pair and core reaching up."""
    made = {"ds4_converge.core.a": {"ds4_converge.service.x"}, "ds4_converge.service.x": {"ds4_converge.models.y"},
            "ds4_converge.models.y": {"ds4_converge.service.x"}}
    assert house.circles(made) == [["ds4_converge.models.y", "ds4_converge.service.x"]]
    assert house.two_way_pairs(made) == [("models", "service")]
    assert house.core_reaches_up(made) == ["ds4_converge.core.a -> ds4_converge.service.x"]
