"""Readiness an agent can use: a tools request must come back as structured tool_calls (a release that returns
DSML as text is reverted), and with speculation on the smoke is asked again at concurrency 2, sampled."""
import pytest

from boxes import REPO

pytestmark = pytest.mark.slow


def test_tool_calls_that_come_back_as_text_are_reverted(box):
    box.spec["health"]["tool_call"] = True
    box.write()
    rc, document = box.converge()
    assert rc == 0, document
    probe = {r["name"]: r for r in document["roles"]}["probe"]
    assert "a tool call" in probe["changes"][0], probe
    good = box.status()["release"]
    with box.edited({"engine.ref": "v0.3.1-dsml-as-text"}):
        rc, document = box.converge()
    assert rc == 1 and document["reverted"], document
    assert "tool-call smoke: the answer is DSML as text (the runtime did not parse it)" in document["error"], \
        document["error"]
    assert f"reverted to {good}" in document["error"] or box.status()["release"] == good, document["error"]
    status = box.status()
    assert status["healthy"] and status["release"] == good, status
    # without the tool-call smoke the same release passes: the greedy smoke alone cannot see it
    with box.edited({"engine.ref": "v0.3.1-dsml-as-text", "health.tool_call": False}):
        rc, document = box.converge()
    assert rc == 0, document


def test_a_release_whose_streamed_answers_are_empty_is_reverted(box):
    """Agents stream: v0.3.1-empty-stream answers right when asked plain, and with no content when streamed."""
    rc, document = box.converge()
    assert rc == 0, document
    good = box.status()["release"]
    with box.edited({"engine.ref": "v0.3.1-empty-stream"}):
        rc, document = box.converge()
    assert rc == 1 and document["reverted"], document
    assert "streamed smoke answer '' (its `content`) does not contain 'Paris'" in document["error"], document["error"]
    status = box.status()
    assert status["healthy"] and status["release"] == good, status


def test_with_speculation_on_the_smoke_runs_again_at_concurrency_2_and_sampled(box):
    box.spec["model"]["mtp"] = str(REPO / "engine" / "models" / "tiny-mtp.gguf")
    box.spec["server"]["speculative"] = {"mode": "mtp"}
    box.write()
    rc, document = box.converge()
    assert rc == 0, document
    probe = {r["name"]: r for r in document["roles"]}["probe"]
    assert "the smoke at concurrency 2, sampled" in probe["changes"][0], probe
    with box.edited({"engine.ref": "v0.3.1-wrong-answer"}):
        rc, document = box.converge()
    assert rc == 1 and "does not contain 'Paris'" in document["error"], document
