"""Approval forms over the API: values checked against the recorded form (field by field, nothing
recorded when refused), recorded with each decision and merged into the step output for later steps;
and deciding by request id with the approver's own key, attacked from every side."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lockstep.engine import Engine
from lockstep.errors import InvalidInput

from .conftest import STEP, TENANT, World, assert_problem, po_definition

FORM: list[dict[str, Any]] = [
    {"name": "amount", "type": "number", "label": "Amount approved", "required": True, "minimum": 0},
    {"name": "cost_centre", "type": "string", "enum": ["ops", "sales"], "required": True},
    {"name": "note", "type": "string", "maxLength": 20},
    {"name": "due", "type": "date"},
    {"name": "checked", "type": "boolean", "required": True},
    {"name": "seats", "type": "integer", "maximum": 10},
]
GOOD = {"amount": 900.5, "cost_centre": "ops", "due": "2025-02-01", "checked": True, "seats": 3}


def form_definition(**policy: Any) -> dict[str, Any]:
    """The purchase order with a form on its approval; `pay` reads the merged values."""
    doc = po_definition(form=FORM, quorum=policy.pop("quorum", 2), **policy)
    doc["steps"][1]["input"] = {
        "po": "${input.po}",
        "amount": f"${{steps['{STEP}'].output.values.amount}}",
        "by": f"${{steps['{STEP}'].output.decisions[0].values.cost_centre}}",
    }
    return doc


@pytest.fixture
def fworld(world: World) -> World:
    world.publish(form_definition())
    return world


def request_id(w: World, run: str) -> str:
    (item,) = [i for i in w.http.get("/v1/approvals/inbox", key=w.keys["alice"]).json() if i["run_id"] == run]
    assert item["form"][0]["name"] == "amount"
    rid: str = item["request_id"]
    return rid


def by_request(w: World, rid: str, user: str, decision: str = "approve", **body: Any) -> Any:
    return w.http.post(f"/v1/approvals/{rid}/decide", json={"decision": decision, **body}, key=w.keys[user])


def test_values_are_checked_field_by_field_and_nothing_is_recorded(fworld: World) -> None:
    """Bad values: 422 invalid_values naming each field; no event, no decision row, no link spent."""
    run = fworld.start()
    link = fworld.mint(run, "alice")
    before = fworld.totals()
    bad = {"amount": -1, "cost_centre": "legal", "note": "x" * 21, "due": "2025-02-30", "seats": 2.5}
    r = fworld.http.post(
        "/v1/approvals/decide",
        json={"token": link["token"], "decision": "approve", "values": {**bad, "extra": 1}},
        key=fworld.keys["alice"],
    )
    problem = assert_problem(r, 422, "invalid_values")
    assert set(problem["fields"]) == {"amount", "cost_centre", "note", "due", "seats", "checked", "extra"}
    assert problem["fields"]["checked"] == "required to approve"
    assert problem["fields"]["amount"] == "must be at least 0"
    assert fworld.totals() == before
    assert fworld.link_status(link["link_id"]) == "pending"


def test_values_are_recorded_per_decision_and_merged_for_the_next_step(fworld: World) -> None:
    """Two approvers with values: each decision holds its own; the output merges them (later wins),
    and the next step's input reads both places."""
    run = fworld.start()
    rid = request_id(fworld, run)
    r1 = by_request(fworld, rid, "alice", values=GOOD)
    assert r1.status_code == 200, r1.text
    r2 = by_request(fworld, rid, "bob", values={**GOOD, "amount": 800, "note": "trimmed"})
    assert r2.status_code == 200, r2.text
    assert r2.json()["request_status"] == "approved"
    recorded = [d["values"] for d in fworld.decisions(run)]
    assert recorded == [GOOD, {**GOOD, "amount": 800, "note": "trimmed"}]
    out = fworld.show(run)["steps"][STEP]["output"]
    assert out["values"] == {**GOOD, "amount": 800, "note": "trimmed"}
    assert [d["values"]["amount"] for d in out["decisions"]] == [900.5, 800]
    (scheduled,) = [e["data"] for e in fworld.events(run) if e["type"] == "ActivityScheduled"]
    assert scheduled["input"] == {"po": "PO-1", "amount": 800, "by": "ops"}


def test_a_rejection_may_leave_required_fields_out(fworld: World) -> None:
    """Required fields bind an approval; a rejection with a note only is recorded with that note."""
    run = fworld.start()
    r = by_request(fworld, request_id(fworld, run), "alice", "reject", values={"note": "too much"})
    assert r.status_code == 200, r.text
    assert fworld.decisions(run)[0]["values"] == {"note": "too much"}
    assert fworld.show(run)["status"] == "failed"


def test_a_step_without_a_form_refuses_values_and_records_no_values_field(world: World) -> None:
    """Old-style steps: values are refused (422 no_form), and a decision's event has no `values` key."""
    run = world.start()
    link = world.mint(run, "alice")
    r = world.http.post(
        "/v1/approvals/decide",
        json={"token": link["token"], "decision": "approve", "values": {"a": 1}},
        key=world.keys["alice"],
    )
    assert_problem(r, 422, "no_form")
    assert world.decide(link["token"], "alice").status_code == 200
    assert "values" not in world.decisions(run)[0]
    assert (
        "form" not in next(e for e in world.events(run) if e["type"] == "ApprovalRequested")["data"]["policy"]
    )


@pytest.mark.parametrize(
    ("field", "problem"),
    [
        ({"name": "Amount", "type": "number"}, "lowercase letters"),
        ({"name": "a", "type": "money"}, "must be one of string, number, integer, boolean, date"),
        ({"name": "a", "type": "number", "enum": ["x"]}, "an enum is a list of strings"),
        ({"name": "a", "type": "string", "maxLength": 10**6}, "from 0 to 4000"),
        ({"name": "a", "type": "string", "minLength": 5, "maxLength": 2}, "larger than maxLength"),
        ({"name": "a", "type": "integer", "minimum": 1.5}, "finite integer"),
        ({"name": "a", "type": "boolean", "minimum": 1}, "bounds a number"),
        ({"name": "a", "type": "string", "enum": [f"v{i}" for i in range(51)]}, "1 to 50 distinct"),
        ({"name": "a", "type": "string", "colour": "red"}, "unknown field"),
    ],
)
def test_publish_refuses_a_bad_form_with_where_and_how(
    world: World, field: dict[str, Any], problem: str
) -> None:
    """Each malformed field is refused at publish, at its path, saying what to fix."""
    with pytest.raises(InvalidInput) as caught:
        world.publish(po_definition(name="bad", form=[field]))
    text = str(caught.value)
    assert "steps[0](manager-approval).approval.form[0]" in text or "approval.form[0]" in text, text
    assert problem in text, text


def test_publish_bounds_the_number_of_fields(world: World) -> None:
    """21 fields are refused (20 at most); a duplicate name is refused."""
    many = [{"name": f"f{i}", "type": "string"} for i in range(21)]
    with pytest.raises(InvalidInput, match="21 fields; a form has at most 20"):
        world.publish(po_definition(name="bad", form=many))
    with pytest.raises(InvalidInput, match="named twice"):
        world.publish(po_definition(name="bad", form=[{"name": "a"}, {"name": "a"}]))


# --- deciding by request id: attacks ------------------------------------------------------------


def test_attack_by_request_id_refuses_everyone_who_may_not_decide(fworld: World) -> None:
    """Another approver's key outside the policy, the initiator, a viewer, a second decision: each
    refused, nothing recorded; the rightful approver then decides."""
    fworld.publish(form_definition(name="po2", quorum=1, approvers={"users": ["alice", "op"]}))
    run = fworld.engine.start("po2", input={"po": "P", "amount": 1}, tenant=TENANT, actor="alice")
    rid = f"{run}/{STEP}/r1"
    before = fworld.totals()
    assert_problem(by_request(fworld, rid, "erin", values=GOOD), 403, "not_an_approver")
    assert_problem(by_request(fworld, rid, "alice", values=GOOD), 403, "initiator")
    assert_problem(by_request(fworld, rid, "viewer", values=GOOD), 403)
    assert_problem(by_request(fworld, rid, "op", values=GOOD), 403)  # named, but no approver role
    assert fworld.totals() == before
    run2 = fworld.start()
    rid2 = request_id(fworld, run2)
    assert by_request(fworld, rid2, "alice", values=GOOD).status_code == 200
    again = assert_problem(by_request(fworld, rid2, "alice", values=GOOD), 409, "already_decided")
    assert "alice already decided approve" in again["detail"]
    refused = [a["actor"] for a in fworld.audit() if a["outcome"] == "refused"]
    assert {"erin", "alice", "viewer", "op"} <= set(refused), refused


def test_attack_another_tenants_request_id_is_not_found(fworld: World) -> None:
    """A request id of tenant acme, used with a key of tenant other: 404, as for an id that never was."""
    run = fworld.start()
    rid = request_id(fworld, run)
    fworld.principals.create_tenant("other")
    key = fworld.principals.create_user("other", "alice", ["approver"], ["managers"]).api_key
    r = fworld.http.post(f"/v1/approvals/{rid}/decide", json={"decision": "approve"}, key=key)
    assert_problem(r, 404)
    assert_problem(by_request(fworld, "nonsense", "alice"), 404, "unknown_request")
    assert_problem(by_request(fworld, f"{run}/{STEP}/r9", "alice", values=GOOD), 409, "not_waiting")
    assert fworld.decisions(run) == []


def test_an_expired_or_settled_request_says_so(fworld: World) -> None:
    """Past its expiry (timer not yet fired): 410 expired; after it timed out: 410; once settled: 409."""
    run = fworld.start()
    rid = request_id(fworld, run)
    fworld.clock.advance(days=3, seconds=1)
    assert_problem(by_request(fworld, rid, "alice", values=GOOD), 410, "expired")
    fworld.service.fire_due_timers()
    assert fworld.show(run)["steps"][STEP]["status"] == "timed_out"
    assert_problem(by_request(fworld, rid, "alice", values=GOOD), 410, "expired")
    run2 = fworld.start(po="PO-2")
    rid2 = request_id(fworld, run2)
    assert by_request(fworld, rid2, "alice", "reject").status_code == 200
    closed = assert_problem(by_request(fworld, rid2, "bob", values=GOOD), 409, "not_waiting")
    assert "rejected" in closed["detail"]


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_form_values_and_by_request_on_both_backends(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The service path on each backend: a decision by request id with values, recorded and merged,
    and the run's snapshot equal to the replay of its events."""
    url = f"sqlite:///{tmp_path}/db.sqlite" if kind == "sqlite" else request.getfixturevalue("pg_url")
    engine = Engine.open(str(url))
    try:
        p = engine.service.principals
        p.create_tenant(TENANT)
        p.create_user(TENANT, "alice", ["approver"], [])
        engine.publish(form_definition(quorum=1, approvers={"users": ["alice"]}), tenant=TENANT)
        run = engine.start("po", input={"po": "P", "amount": 1}, tenant=TENANT)
        alice = p.principal(TENANT, "alice")
        assert alice is not None
        (item,) = engine.service.approvals.inbox(alice)
        result = engine.service.approvals.decide_by_request(alice, item.request_id, "approve", values=GOOD)
        assert result.request_status == "approved"
        assert engine.show(run, tenant=TENANT)["steps"][STEP]["output"]["values"] == GOOD
        assert all(v.ok for v in engine.service.verify())
    finally:
        engine.close()


def test_the_review_page_shows_errors_next_to_fields_and_records_nothing(fworld: World) -> None:
    """The inbox review page: labelled inputs for each field; a bad amount comes back 422 with the
    error tied to its input (aria-describedby) and the typed text kept; a good one is recorded."""
    run = fworld.start()
    ui, csrf = fworld.ui("alice")
    path = f"/ui/approvals/{run}/{STEP}"
    shown = ui.get(path).text
    assert '<label for="field-amount">Amount approved' in shown
    assert 'name="field_cost_centre"' in shown
    assert "<select" in shown
    assert 'type="date"' in shown
    assert 'type="checkbox"' in shown
    before = fworld.totals()
    form = {"csrf": csrf, "decision": "approve", "field_amount": "-5", "field_cost_centre": "ops"}
    r = ui.post(path, data={**form, "field_checked": "on", "field_seats": "two"})
    assert r.status_code == 422, r.text
    assert 'aria-describedby="field-amount-error"' in r.text
    assert "Amount approved must be at least 0" in r.text
    assert "seats must be a whole number" in r.text
    assert 'value="-5"' in r.text
    assert fworld.totals() == before
    r = ui.post(path, data={**form, "field_amount": "12.5", "field_checked": "on", "field_due": "2025-03-01"})
    assert r.status_code == 200, r.text
    assert fworld.decisions(run)[0]["values"] == {
        "amount": 12.5,
        "cost_centre": "ops",
        "due": "2025-03-01",
        "checked": True,
    }


def test_a_form_inside_a_parallel_branch_and_a_for_each_body(world: World) -> None:
    """An approval with a form in a branch, and in a for-each body: decided by request id with values,
    which are the outputs of the steps inside (addressed by key); a bad value is refused there too."""
    form = [{"name": "amount", "type": "number", "required": True}]
    ask = {"approvers": {"users": ["alice"]}, "quorum": 1, "timeout": "1h", "form": form}
    world.publish(
        {
            "name": "shaped",
            "steps": [
                {
                    "id": "both",
                    "parallel": {
                        "branches": {
                            "left": [{"id": "ask", "approval": ask}],
                            "right": [{"id": "nap", "wait": "1s"}],
                        }
                    },
                },
                {
                    "id": "each",
                    "for_each": {"items": "${[1, 2]}", "body": [{"id": "ask-item", "approval": ask}]},
                },
            ],
        }
    )
    run = world.engine.start("shaped", input={}, tenant=TENANT)
    alice = world.principal("alice")
    (item,) = world.approvals.inbox(alice)
    assert item.step == "both.left.ask"
    assert item.form is not None
    assert item.form[0]["name"] == "amount"
    world.approvals.decide_by_request(alice, item.request_id, "approve", values={"amount": 7})
    world.clock.advance(seconds=2)
    world.service.fire_due_timers()
    shown = world.show(run)
    assert shown["steps"]["both.left.ask"]["output"]["values"] == {"amount": 7}
    assert shown["steps"]["both"]["status"] == "succeeded"
    for n, it in enumerate(sorted(world.approvals.inbox(alice), key=lambda i: i.step)):
        bad = by_request(world, it.request_id, "alice", values={"amount": "x"})
        assert_problem(bad, 422, "invalid_values")
        world.approvals.decide_by_request(alice, it.request_id, "approve", values={"amount": n})
    steps = world.show(run)["steps"]
    assert [steps[f"each[{i}].ask-item"]["output"]["values"] for i in (0, 1)] == [
        {"amount": 0},
        {"amount": 1},
    ]
    assert world.show(run)["status"] == "completed"
