"""The read models (app/views): frozen, recorded JSON shown exactly as recorded, and the keys a view
leaves out of its JSON (a step's compensation until there is one; an event's step and attempt in the
plain JSON when the event has none)."""

from __future__ import annotations

import json

import pydantic
import pytest

from lockstep.app.views import EventView, RepairResult, StepView

STEP = {
    "status": "failed",
    "attempts": 1,
    "output": None,
    "idempotency_key": None,
    "started_at": "2025-01-01T00:00:00.000Z",
    "finished_at": "2025-01-01T00:00:01.000Z",
}


def test_a_view_is_frozen() -> None:
    view = StepView(**STEP, error=None)
    with pytest.raises(pydantic.ValidationError):
        view.status = "succeeded"


def test_recorded_json_is_shown_as_recorded() -> None:
    """A recorded error keeps the core's keys, their order and any key the core added later, in the
    plain JSON and in the API's JSON alike (no re-validation that would reorder or drop them)."""
    error = {
        "code": "NoBranchMatched",
        "step": "route",
        "message": "no branch matched",
        "hint": [1, {"a": 2}],
    }
    view = StepView(**STEP, error=error)
    assert list(view.plain()["error"]) == ["code", "step", "message", "hint"]
    assert json.loads(view.model_dump_json())["error"] == error
    assert view.model_dump_json().index('"step"') < view.model_dump_json().index('"message"')
    marker = "[not shown: 300000 bytes, more than the 262144 any view shows]"
    assert StepView(**STEP, error=marker).plain()["error"] == marker


def test_a_step_shows_its_compensation_only_once_there_is_one() -> None:
    assert "compensation" not in StepView(**STEP, error=None).plain()
    assert "compensation" not in json.loads(StepView(**STEP, error=None).model_dump_json())
    comp = {"status": "pending", "attempts": 0, "error": None}
    assert StepView(**STEP, error=None, compensation=comp).plain()["compensation"] == comp


def test_an_event_without_step_has_none_in_its_plain_json_and_null_over_http() -> None:
    """As before: `lockstep events --json` leaves step and attempt out, GET .../events shows them null."""
    started = EventView(seq=1, type="RunStarted", at="2025-01-01T00:00:00.000Z", data={"run_id": "r"})
    assert list(started.plain()) == ["seq", "type", "at", "data"]
    assert json.loads(started.model_dump_json())["step"] is None
    step = EventView(seq=2, type="StepSkipped", at="2025-01-01T00:00:00.000Z", step="a", data={"step": "a"})
    assert list(step.plain()) == ["seq", "type", "at", "step", "data"]


def test_a_repair_result_shows_a_proposal_only_when_there_is_one() -> None:
    done = RepairResult(run_id="r", status="paused", events=["RunPaused"])
    assert done.plain() == {"run_id": "r", "status": "paused", "events": ["RunPaused"]}
    proposal = {
        "proposal_id": "p1",
        "kind": "skip",
        "command": {"step": "a", "output": None, "roles": ["operator"]},
        "reason": "why",
        "actor": "alice",
        "at": "2025-01-01T00:00:00.000Z",
        "seq": 7,
    }
    proposed = RepairResult(run_id="r", status="waiting", events=["RepairProposed"], proposal=proposal)
    assert proposed.plain()["proposal"] == proposal
