"""How long the held road holds clients, as the plan says it: the numbers come from the spec and from the load
time measured at the release's last start here (state.json), never invented."""
from types import SimpleNamespace

from ds4_converge.core.state import Deployment, State
from ds4_converge.service.switch import held_for
from ds4_converge.spec.loader import load_spec
from boxes import REPO


def ctx_with(good: list[Deployment], **front):
    spec = load_spec(REPO / "spec/examples/sim-front.yaml").spec
    spec = spec.model_copy(update={"front": spec.front.model_copy(update=front)})
    return SimpleNamespace(spec=spec, state=State(current=good[-1] if good else None, good=good))


def deployed(release: str, load_s: float | None) -> Deployment:
    return Deployment(release=release, program_conf=release, command=[], endpoint="http://127.0.0.1:8001",
                      load_s=load_s)


def test_the_plan_says_how_long_requests_are_held_with_the_load_measured_at_the_last_start():
    said = held_for(ctx_with([deployed("r2", 17.2), deployed("r1", 16.0)]), "r2")
    assert said == ("requests are held for the drain of what is in flight (at most server.drain_s 300s), the stop "
                    "and the load and the smoke (17.2s at release r2's last start here); the 3s soak goes on while "
                    "it serves (front.flip: after-smoke)")
    # a release never started here: last good's figure, said as such
    assert "release r3 has not started here yet; last good r1 took 16s" in held_for(
        ctx_with([deployed("r2", 17.2), deployed("r1", 16.0)]), "r3")
    assert "the load and the smoke (not measured here yet)" in held_for(ctx_with([deployed("r1", None)]), "r1")


def test_after_soak_and_a_first_start_hold_through_the_soak():
    assert held_for(ctx_with([deployed("r1", 16.0)], flip="after-soak"), "r2").endswith(
        "and the 3s soak (front.flip: after-soak)")
    assert held_for(ctx_with([]), "r1").endswith("and the 3s soak (no last good to revert to: a first start)")
