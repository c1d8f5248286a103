"""The reconciler with fake roles: order, plan → apply, --check, failures, and the revert (also when it fails).

Fake roles are modules in all but name: a NAME and a plan(ctx). Their changes' actions record what ran, so each
test says exactly which actions a run applies. No supervisord, no engine: these run in milliseconds.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ds4_converge.orchestrate import reconciler
from ds4_converge.orchestrate.context import make_context
from ds4_converge.core.plan import Change, Finding, RoleFailed, RolePlan
from ds4_converge.core.state import Deployment
from ds4_converge.facts import HostFacts
from ds4_converge.health.probe import Unhealthy
from ds4_converge.models.digests import DigestCache
from ds4_converge.service.supervisor import SupervisorError
from ds4_converge.service.switch import Switch
from ds4_converge.spec.loader import LoadedSpec
from fakehost import spec


@dataclass
class FakeRole:
    """Plans the given lists of changes, one list per call (a replan asks again)."""

    NAME: str
    plans: list = field(default_factory=list)
    findings: list = field(default_factory=list)
    raises: BaseException | None = None
    planned: int = 0

    def plan(self, ctx) -> RolePlan:
        self.planned += 1
        if self.raises is not None:
            raise self.raises
        changes, *rest = self.plans or [[]]
        self.plans = rest
        replan = bool(rest)
        return RolePlan(self.NAME, changes, reason=f"{self.NAME} plan {self.planned}", findings=self.findings,
                        replan=replan)


@pytest.fixture
def ctx(tmp_path):
    loaded = LoadedSpec(spec(paths={"root": str(tmp_path / "root")}), tmp_path / "spec.yaml")
    made = make_context(loaded, say=lambda *_: None)
    made.facts = HostFacts()  # gathered: the reconciler must not gather again
    made.ran, made.locked = [], 0
    made.sw = Switch()  # the run's switch: a fake change begins it

    def before_change():
        made.locked += 1

    made.before_change = before_change
    return made


def change(what: str, *, fails: BaseException | None = None, switches: bool = False, counts: bool = True):
    def action(ctx):
        ctx.ran.append(what)
        if switches:
            ctx.sw.phase = "begun"
        if fails is not None:
            raise fails
        return f"did {what}"

    return Change(what, action=action, counts=counts)


def no_revert(ctx, outcome):
    raise AssertionError("nothing was stopped: no revert may run")


def test_apply_runs_exactly_the_planned_changes_in_order(ctx):
    roles = [FakeRole("one", [[change("a"), change("b")]]), FakeRole("two", [[]]), FakeRole("three", [[change("c")]])]
    outcome = reconciler.converge(ctx, roles=roles, revert=no_revert)
    assert outcome.ok, outcome.error
    assert ctx.ran == ["a", "b", "c"]
    assert [(r.name, r.status, r.changes) for r in outcome.results] == [
        ("one", "changed", ["a", "b"]), ("two", "ok", []), ("three", "changed", ["c"])]
    assert outcome.results[0].msg == "did a; did b" and outcome.results[1].msg == "two plan 1"
    assert ctx.locked == 2, "the lock is asked for before each role that applies anything, and only then"


def test_check_applies_nothing_and_says_what_would_change(ctx):
    ctx.check = True
    roles = [FakeRole("one", [[change("a")]]), FakeRole("two", [[]])]
    outcome = reconciler.converge(ctx, roles=roles, revert=no_revert)
    assert outcome.ok and ctx.ran == [] and ctx.locked == 0
    assert [(r.status, r.msg, r.changes) for r in outcome.results] == [
        ("changed", "would one plan 1", ["a"]), ("ok", "two plan 1", [])]


def test_a_replanned_role_applies_each_plan_and_reports_both(ctx):
    refresh = change("refresh", counts=False)
    role = FakeRole("engine", [[refresh], [change("build")]])
    outcome = reconciler.converge(ctx, roles=[role], revert=no_revert)
    assert ctx.ran == ["refresh", "build"] and role.planned == 2
    (result,) = outcome.results
    assert result.status == "changed" and result.changes == ["refresh", "build"]


def test_a_refresh_alone_does_not_make_the_role_changed(ctx):
    role = FakeRole("engine", [[change("refresh", counts=False)], []])
    outcome = reconciler.converge(ctx, roles=[role], revert=no_revert)
    (result,) = outcome.results
    assert ctx.ran == ["refresh"] and result.status == "ok" and not outcome.changed
    assert result.msg == "did refresh; engine plan 2"


def test_an_error_finding_stops_the_run_before_any_change(ctx):
    roles = [FakeRole("one", [[change("a")]], findings=[Finding("error", "port held")]), FakeRole("two", [[change("b")]])]
    outcome = reconciler.converge(ctx, roles=roles, revert=no_revert)
    assert not outcome.ok and ctx.ran == [] and ctx.locked == 0
    assert outcome.error == "one: port held"
    assert [(r.name, r.status) for r in outcome.results] == [("one", "failed"), ("two", "skipped")]


@pytest.mark.parametrize("error", [RoleFailed("no"), OSError("disk gone"), SupervisorError("socket refused")])
def test_a_failing_plan_is_a_clean_failure(ctx, error):
    roles = [FakeRole("one", raises=error), FakeRole("two", [[change("b")]])]
    outcome = reconciler.converge(ctx, roles=roles, revert=no_revert)
    assert not outcome.ok and outcome.error == f"one: {error}" and ctx.ran == []


def test_a_failure_before_the_switch_reverts_nothing(ctx):
    roles = [FakeRole("build", [[change("make", fails=RoleFailed("make exited 2", "cc: error"))]]),
             FakeRole("service", [[change("switch", switches=True)]])]
    outcome = reconciler.converge(ctx, roles=roles, revert=no_revert, sw=ctx.sw)
    assert not outcome.ok and ctx.ran == ["make"] and outcome.detail == "cc: error"
    assert [(r.name, r.status) for r in outcome.results] == [("build", "failed"), ("service", "skipped")]


@pytest.mark.parametrize("error", [RoleFailed("unhealthy"), KeyboardInterrupt()])
def test_a_failure_after_the_switch_reverts(ctx, error):
    reverted = []
    roles = [FakeRole("service", [[change("switch", switches=True)]]),
             FakeRole("probe", [[change("probe", fails=error)]])]
    outcome = reconciler.converge(ctx, roles=roles, revert=lambda c, o: reverted.append(o.error), sw=ctx.sw)
    assert not outcome.ok and ctx.ran == ["switch", "probe"]
    assert reverted == [outcome.error] and outcome.error.startswith("probe: ")


def test_what_planning_learned_is_written_after_the_plans_not_in_check_mode(ctx, tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"x")
    ctx.layout.root.mkdir()

    def learns(c):
        c.digests.remember(model, "ab" * 32)
        return RolePlan("learns")

    ctx.check = True
    reconciler.converge(ctx, roles=[type("R", (), {"NAME": "learns", "plan": staticmethod(learns)})], revert=no_revert)
    assert not (ctx.layout.cache / "digests.json").exists(), "--check writes nothing, not even a cache"
    ctx.check = False
    ctx.digests = DigestCache(ctx.layout.cache / "digests.json", deferred=True)  # a new run's
    reconciler.converge(ctx, roles=[type("R", (), {"NAME": "learns", "plan": staticmethod(learns)})], revert=no_revert)
    assert (ctx.layout.cache / "digests.json").exists()


# ------------------------------------------------------------------------------------------------- revert


def deployment(release: str) -> Deployment:
    return Deployment(release=release, program_conf=f"[program:ds4]\n; {release}\n", command=["ds4-server"],
                      endpoint="http://127.0.0.1:1")


@pytest.fixture
def failed_switch(ctx):
    """A run whose new release failed after the old engine (last good) was stopped."""
    ctx.state.bless(deployment("old"))
    ctx.desired = deployment("new")
    ctx.sw.phase = "begun"
    return ctx


def test_revert_puts_last_good_back_and_proves_it(failed_switch, monkeypatch):
    switched = []
    monkeypatch.setattr(reconciler.drive, "run", lambda c, sw, steps: switched.append(sw.target.release))
    monkeypatch.setattr("ds4_converge.health.probe.wait_healthy", lambda target, state, soak: 4242)
    outcome = reconciler.Outcome(ok=False, error="probe: unhealthy", switch=failed_switch.sw)
    reconciler.revert_to_last_good(failed_switch, outcome)
    assert switched == ["old"] and outcome.reverted
    assert outcome.error == "probe: unhealthy; reverted to old"


@pytest.mark.parametrize("where", ["switch", "probe"])
def test_a_revert_that_fails_too_says_so_and_raises_nothing(failed_switch, monkeypatch, where):
    def switch(c, sw, steps):
        if where == "switch":
            raise SupervisorError("supervisord rejected the config")

    def healthy(target, state, soak):
        raise Unhealthy("ds4-server is FATAL")

    monkeypatch.setattr(reconciler.drive, "run", switch)
    monkeypatch.setattr("ds4_converge.health.probe.wait_healthy", healthy)
    roles = [FakeRole("probe", [[change("probe", fails=RoleFailed("unhealthy"))]])]
    outcome = reconciler.converge(failed_switch, roles=roles, sw=failed_switch.sw)
    assert not outcome.ok and not outcome.reverted
    cause = "supervisord rejected the config" if where == "switch" else "ds4-server is FATAL"
    assert outcome.error == f"probe: unhealthy; revert to old failed too: {cause}; serving now: nothing"


def test_a_first_install_that_fails_is_left_stopped(ctx):
    ctx.desired = deployment("new")
    ctx.sw.phase = "begun"
    ctx.state.current = deployment("new")
    outcome = reconciler.Outcome(ok=False, error="probe: unhealthy", switch=ctx.sw)
    reconciler.revert_to_last_good(ctx, outcome)  # no supervisord runs under this root: nothing to stop
    assert not outcome.reverted and ctx.state.current is None
    assert "no last good release to revert to (first install)" in outcome.error


def test_nothing_to_revert_to_when_last_good_is_the_failed_config(failed_switch):
    failed_switch.desired = deployment("old")
    outcome = reconciler.Outcome(ok=False, error="probe: unhealthy", switch=failed_switch.sw)
    reconciler.revert_to_last_good(failed_switch, outcome)
    assert not outcome.reverted and "is this same config" in outcome.error
