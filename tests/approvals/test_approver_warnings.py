"""Approvers the tenant does not have: publishing warns (and succeeds), and when a run makes the request
it records why nobody can decide (ApprovalRequested.warnings) and the run's explanation says so, on
SQLite and PostgreSQL. A request whose approvers can decide stores the event exactly as before (no
`warnings` key); replacing the approver clears what the request recorded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lockstep.engine import Engine


def approval(
    users: list[str] | None = None, groups: list[str] | None = None, quorum: int = 1
) -> dict[str, Any]:
    return {
        "name": "po",
        "steps": [
            {
                "id": "approve",
                "approval": {
                    "approvers": {"users": users or [], "groups": groups or []},
                    "quorum": quorum,
                    "timeout": "1d",
                },
            },
            {"id": "pay", "activity": "payments.charge", "timeout": "5s"},
        ],
    }


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    url = (
        f"sqlite:///{tmp_path}/db.sqlite" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    )
    e = Engine.open(str(url))
    p = e.service.principals
    p.create_tenant("acme")
    p.create_user("acme", "bob", ["approver"], ["finance"])
    p.create_user("acme", "vic", ["viewer"], ["audit"])
    p.create_user("acme", "op", ["operator"], [])
    try:
        yield e
    finally:
        e.close()


def requested(engine: Engine, run_id: str) -> dict[str, Any]:
    (event,) = [e for e in engine.events(run_id, tenant="acme") if e["type"] == "ApprovalRequested"]
    data: dict[str, Any] = event["data"]
    return data


def test_an_unknown_user_is_a_warning_at_publish_and_again_on_the_run(engine: Engine) -> None:
    """`alice` is no user of acme: publish succeeds with a warning at the approvers' path; the run's
    request records it and its explanation shows it."""
    published = engine.publish(approval(users=["alice"]), tenant="acme")
    assert published["version"] == 1
    (warning,) = published["warnings"]
    assert warning["path"] == "steps[0](approve).approval.approvers"
    assert warning["message"].startswith("no user alice in tenant acme; nobody can approve")

    run_id = engine.start("po", tenant="acme")
    data = requested(engine, run_id)
    assert data["warnings"][0] == "no user alice in tenant acme"
    assert data["warnings"][1].startswith("nobody can approve")
    shown = engine.show(run_id, tenant="acme")
    assert "no user alice in tenant acme; nobody can approve" in shown["wait_reason"], shown["wait_reason"]


def test_groups_without_deciders_and_quorums_out_of_reach_are_warned(engine: Engine) -> None:
    """An empty group, a group of viewers, a quorum only fewer people can meet: each said once."""
    found = engine.publish(approval(groups=["nobody", "audit", "finance"], quorum=2), tenant="acme")[
        "warnings"
    ]
    (warning,) = found
    assert "no user in group nobody of tenant acme" in warning["message"]
    assert "nobody in group audit can decide (vic:" in warning["message"]
    assert "only 1 of the approvers can decide (bob), fewer than the quorum of 2" in warning["message"]


def test_approvers_who_can_decide_leave_the_event_as_it_was(engine: Engine) -> None:
    """bob may approve: no warning at publish, and the stored ApprovalRequested has no `warnings` key."""
    assert engine.publish(approval(users=["bob"]), tenant="acme")["warnings"] == []
    run_id = engine.start("po", tenant="acme")
    assert "warnings" not in requested(engine, run_id)
    assert "nobody" not in (engine.show(run_id, tenant="acme")["wait_reason"] or "")


def test_a_user_created_after_publishing_is_not_warned_about_on_the_run(engine: Engine) -> None:
    """The request checks the tenant as it is when the run makes it, not as it was at publish."""
    assert engine.publish(approval(users=["carl"]), tenant="acme")["warnings"]
    engine.service.principals.create_user("acme", "carl", ["approver"], [])
    run_id = engine.start("po", tenant="acme")
    assert "warnings" not in requested(engine, run_id)


def test_the_initiator_who_may_not_decide_is_named_on_the_run(engine: Engine) -> None:
    """bob started the run and the step does not allow the initiator: nobody else can decide."""
    engine.publish(approval(users=["bob"]), tenant="acme")
    run_id = engine.start("po", tenant="acme", actor="bob")
    warnings = requested(engine, run_id)["warnings"]
    assert warnings[0] == "user bob started the run and the step does not allow the initiator to decide"


def test_replacing_the_approver_clears_the_recorded_warning(engine: Engine) -> None:
    """An operator replaces the missing alice with mia (of the step's group, created since): the
    explanation no longer says that nobody can approve."""
    engine.publish(approval(users=["alice"], groups=["managers"]), tenant="acme")
    run_id = engine.start("po", tenant="acme")
    assert "nobody can approve" in engine.show(run_id, tenant="acme")["wait_reason"]
    engine.service.principals.create_user("acme", "mia", ["approver"], ["managers"])
    engine.service.approvals.reassign("acme", run_id, "approve", "alice", "mia", "alice left", actor="op")
    shown = engine.show(run_id, tenant="acme")
    assert "nobody can approve" not in shown["wait_reason"]
    assert engine.verify(run_id)[0]["ok"] is True
