"""A step a finished run never entered shows as `not_taken` (API, CLI and UI all show RunView); while the
run goes on, a step not yet reached stays `pending` (waiting is not "not taken")."""

from __future__ import annotations

from lockstep.app.service import Service

ROUTE = {
    "name": "route",
    "steps": [
        {"id": "pick", "choice": [{"if": "input.big", "next": "hold"}, {"else": "done"}]},
        {"id": "hold", "wait": "1h"},
        {"id": "done", "succeed": True},
    ],
}


def test_a_branch_a_completed_run_did_not_take_is_not_taken(svc: Service) -> None:
    """The choice went to `done`: `hold` was never entered, and the finished run says so."""
    svc.publish("acme", ROUTE)
    run = svc.start("acme", "route", input={"big": False}).run_id
    shown = svc.show("acme", run)
    assert shown.status == "completed"
    assert {k: s.status for k, s in shown.steps.items()} == {
        "pick": "succeeded",
        "hold": "not_taken",
        "done": "succeeded",
    }
    assert shown.steps["hold"].plain()["status"] == "not_taken"


def test_a_waiting_run_keeps_its_later_steps_pending_until_it_is_cancelled(svc: Service) -> None:
    """While the run waits on `hold`, `done` is still to come (pending); cancelled, it was not taken."""
    svc.publish("acme", ROUTE)
    run = svc.start("acme", "route", input={"big": True}).run_id
    shown = svc.show("acme", run)
    assert shown.status == "waiting"
    assert shown.steps["hold"].status == "waiting"
    assert shown.steps["done"].status == "pending"
    svc.cancel("acme", run, "not needed", actor="ops")
    after = svc.show("acme", run)
    assert after.status == "cancelled"
    assert after.steps["done"].status == "not_taken"
    assert after.steps["pick"].status == "succeeded"
