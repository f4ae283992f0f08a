"""How an approval request ends: rejection (and reject_quorum), timeout with each on_timeout, cancellation
while waiting, a server restart between request and decision, and approver reassignment."""

from __future__ import annotations

from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from .conftest import ESCALATE, STEP, FakeClock, World, assert_problem, open_world, po_definition

# reserve (compensable) -> approval -> pay: a rejection must undo the reservation.
RESERVE = {
    "id": "reserve",
    "activity": "inventory.reserve",
    "input": {"po": "${input.po}"},
    "timeout": "30s",
    "compensate": {"activity": "inventory.release", "input": {"po": "${input.po}"}},
}


def _work(world: World, activity: str, output: Any = None) -> str:
    """Act as a worker: lease the one ready task of `activity` and report success; return its run id."""
    leases = world.service.claim("w1", [activity], limit=1, lease_ttl=timedelta(seconds=30))
    assert len(leases) == 1, leases
    lease = leases[0]
    assert (
        world.service.complete(lease.task_id, lease.attempt, lease.fencing, output or {"ok": True})
        == "accepted"
    )
    return str(lease.run_id)


def _links(world: World, run: str) -> dict[str, str]:
    return {r[0]: r[1] for r in world.sql("SELECT link_id, status FROM approval_links WHERE run_id = ?", run)}


# --- rejection ---------------------------------------------------------------------------------------


def test_one_rejection_fails_the_run(world: World) -> None:
    """on_reject: fail: bob's rejection (after alice approved) fails the run; open links then answer 410."""
    run = world.start()
    assert world.decide(world.mint(run, "alice")["token"], "alice").status_code == 200
    carol = world.mint(run, "carol")
    r = world.decide(world.mint(run, "bob")["token"], "bob", "reject", comment="over budget")
    assert r.status_code == 200, r.text
    assert (r.json()["request_status"], r.json()["run_status"]) == ("rejected", "failed")
    rejected = next(e for e in world.events(run) if e["type"] == "ApprovalRejected")
    assert rejected["data"]["by"] == ["bob"]
    shown = world.show(run)
    assert shown["status"] == "failed"
    assert shown["error"]["code"] == "ApprovalRejected"
    assert shown["steps"][STEP]["status"] == "rejected"
    assert world.types(run)[-1] == "RunFailed"
    before = world.totals()
    assert_problem(world.decide(carol["token"], "carol"), 410, "revoked")
    assert world.totals() == before


def test_rejection_compensates_completed_steps_then_fails(world: World) -> None:
    """A rejection after a completed compensable step runs its compensation, then ends failed."""
    world.publish({**po_definition("po-reserve"), "steps": [RESERVE, *po_definition()["steps"]]})
    run = world.start("po-reserve")
    _work(world, "inventory.reserve")
    assert world.show(run)["current_step"] == STEP
    r = world.decide(world.mint(run, "alice")["token"], "alice", "reject")
    assert r.status_code == 200, r.text
    shown = world.show(run)
    assert shown["status"] == "compensating"
    assert "CompensationScheduled" in world.types(run)
    assert _work(world, "inventory.release") == run
    shown = world.show(run)
    assert shown["status"] == "failed"
    assert shown["error"]["code"] == "ApprovalRejected"
    assert shown["steps"]["reserve"]["compensation"]["status"] == "compensated"


def test_rejection_can_route_to_a_step(world: World) -> None:
    """on_reject: escalate sends the run to that step instead of failing it."""
    world.publish(po_definition("po-route", on_reject="escalate", extra_steps=[ESCALATE]))
    run = world.start("po-route")
    r = world.decide(world.mint(run, "carol")["token"], "carol", "reject")
    assert r.status_code == 200, r.text
    shown = world.show(run)
    assert (shown["status"], shown["current_step"]) == ("waiting", "escalate")
    assert shown["steps"][STEP]["status"] == "rejected"
    assert world.types(run)[-2:] == ["ApprovalRejected", "TimerScheduled"]


def test_reject_quorum_of_two_needs_two_rejections(world: World) -> None:
    """With reject_quorum: 2 one rejection leaves the run waiting; the second rejects it."""
    world.publish(po_definition("po-rq", reject_quorum=2))
    run = world.start("po-rq")
    first = world.decide(world.mint(run, "alice")["token"], "alice", "reject")
    assert first.json()["request_status"] == "pending"
    shown = world.show(run)
    assert (shown["status"], shown["current_step"]) == ("waiting", STEP)
    assert "alice rejected" in shown["wait_reason"]
    second = world.decide(world.mint(run, "dave")["token"], "dave", "reject")
    assert second.json()["request_status"] == "rejected"
    assert world.show(run)["status"] == "failed"
    assert world.types(run).count("ApprovalRejected") == 1


# --- timeout -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("on_timeout", "status", "error", "step"),
    [
        ("reject", "failed", "ApprovalRejected", None),
        ("fail", "failed", "ApprovalTimedOut", None),
        ("escalate", "waiting", None, "escalate"),
    ],
)
def test_timeout_applies_on_timeout_and_revokes_links(
    world: World, on_timeout: str, status: str, error: str | None, step: str | None
) -> None:
    """After the timeout the timer fires once: ApprovalTimedOut, then on_timeout; open links answer 410."""
    world.publish(po_definition(f"po-{on_timeout}", on_timeout=on_timeout, extra_steps=[ESCALATE]))
    run = world.start(f"po-{on_timeout}")
    assert world.decide(world.mint(run, "alice")["token"], "alice").status_code == 200
    links = [world.mint(run, who) for who in ("bob", "carol")]
    world.clock.advance(days=3, milliseconds=-1)
    assert world.service.fire_due_timers() == 0  # not yet due
    assert world.show(run)["status"] == "waiting"
    world.clock.advance(milliseconds=1)
    assert world.service.fire_due_timers() == 1
    assert world.service.fire_due_timers() == 0  # fired once, never again
    types = world.types(run)
    assert types.count("ApprovalTimedOut") == 1
    assert types[types.index("ApprovalTimedOut") - 1] == "TimerFired"
    shown = world.show(run)
    assert (shown["status"], shown["current_step"]) == (status, step)
    assert (shown["error"] or {}).get("code") == error
    assert shown["steps"][STEP]["status"] == "timed_out"
    assert all(_links(world, run)[x["link_id"]] == "revoked" for x in links)
    assert world.sql("SELECT status FROM approval_requests")[0][0] == "timed_out"
    before = world.totals()
    for x, who in zip(links, ("bob", "carol"), strict=True):
        assert_problem(world.decide(x["token"], who), 410)
    assert world.totals() == before


def test_timer_does_not_fire_after_the_quorum(world: World) -> None:
    """Once granted, the approval timer is stale: firing at the old deadline changes nothing."""
    run = world.start()
    for who in ("alice", "bob"):
        assert world.decide(world.mint(run, who)["token"], who).status_code == 200
    seq = world.show(run)["seq"]
    world.clock.advance(days=4)
    world.service.fire_due_timers()
    assert "ApprovalTimedOut" not in world.types(run)
    assert world.show(run)["seq"] == seq


# --- cancellation -----------------------------------------------------------------------------------


def test_cancel_while_waiting_revokes_links_and_stales_the_timer(world: World) -> None:
    """Cancelling a waiting run records ApprovalCancelled and TimerCancelled; later decisions are refused."""
    run = world.start()
    link = world.mint(run, "alice")
    other = world.mint(run, "carol")
    r = world.http.post(f"/v1/runs/{run}/cancel", json={"reason": "PO withdrawn"}, key=world.keys["op"])
    assert r.status_code == 200, r.text
    types = world.types(run)
    assert {"CancelRequested", "TimerCancelled", "ApprovalCancelled", "RunCancelled"} <= set(types)
    assert world.show(run)["status"] == "cancelled"
    assert set(_links(world, run).values()) == {"revoked"}
    assert world.sql("SELECT status FROM approval_requests")[0][0] == "cancelled"
    assert world.sql("SELECT status FROM timers WHERE run_id = ?", run) == [("cancelled",)]
    before = world.totals()
    assert_problem(world.decide(link["token"], "alice"), 410, "revoked")
    assert_problem(world.decide(other["token"], "carol", "reject"), 410, "revoked")
    assert_problem(world.mint_response(run, "bob"), 409, "not_waiting")
    world.clock.advance(days=4)
    assert world.service.fire_due_timers() == 0
    assert world.totals() == before
    assert world.decisions(run) == []


# --- restart ----------------------------------------------------------------------------------------


def test_restart_between_request_and_decision(tmp_path: Path, clock: FakeClock) -> None:
    """A link minted before the server stops still works after a new engine and app open the same file."""
    db = tmp_path / "db.sqlite"
    with ExitStack() as stack:
        first = open_world(db, clock, stack)
        first.publish(po_definition())
        run = first.start()
        link = first.mint(run, "alice")
        keys = first.keys
    clock.advance(hours=30)
    with ExitStack() as stack:
        second = open_world(db, clock, stack, keys)
        r = second.decide(link["token"], "alice")
        assert r.status_code == 200, r.text
        assert r.json()["request_status"] == "pending"
        assert_problem(second.decide(link["token"], "alice"), 409, "already_decided")
        assert [d["approver"] for d in second.decisions(run)] == ["alice"]
        assert [v.ok for v in second.service.verify(run)] == [True]  # snapshot equals the replay


# --- reassignment ------------------------------------------------------------------------------------


def test_reassign_revokes_old_links_and_lets_the_new_approver_decide(world: World) -> None:
    """Replacing alice by dave (in finance): alice's links answer 410, dave decides; with reason, actor."""
    run = world.start()
    old = world.mint(run, "alice")
    r = world.http.post(
        f"/v1/runs/{run}/approvals/{STEP}/reassign",
        json={"old": "alice", "new": "dave", "reason": "alice is on leave"},
        key=world.keys["op"],
    )
    assert r.status_code == 200, r.text
    replaced = next(e for e in world.events(run) if e["type"] == "ApproverReplaced")
    want = {"old": "alice", "new": "dave", "reason": "alice is on leave", "actor": "op"}
    assert {k: replaced["data"][k] for k in want} == want
    assert world.link_status(old["link_id"]) == "revoked"
    before = world.totals()
    assert_problem(world.decide(old["token"], "alice"), 410, "revoked")
    assert_problem(world.mint_response(run, "alice"), 409, "not_an_approver")
    assert world.totals() == before
    # The new approver is notified (an outbox row for dave) and can decide.
    assert world.sql("SELECT approver FROM notifications WHERE run_id = ? AND approver IS NOT NULL", run) == [
        ("dave",)
    ]
    inbox = {u: world.http.get("/v1/approvals/inbox", key=world.keys[u]).json() for u in ("alice", "dave")}
    assert (inbox["alice"], [i["run_id"] for i in inbox["dave"]]) == ([], [run])
    assert "{dave, bob, finance}" in world.show(run)["wait_reason"]
    ok = world.decide(world.mint(run, "dave")["token"], "dave")
    assert ok.status_code == 200, ok.text
    assert "dave approved" in world.show(run)["wait_reason"]


def test_reassign_refuses_someone_who_already_decided(world: World) -> None:
    """A recorded decision cannot be reassigned (409 already_decided); a reason is required (422)."""
    run = world.start()
    assert world.decide(world.mint(run, "bob")["token"], "bob").status_code == 200
    url = f"/v1/runs/{run}/approvals/{STEP}/reassign"
    before = world.totals()
    r = world.http.post(url, json={"old": "bob", "new": "erin", "reason": "too late"}, key=world.keys["op"])
    assert_problem(r, 409, "already_decided")
    r = world.http.post(url, json={"old": "alice", "new": "erin", "reason": " "}, key=world.keys["op"])
    assert_problem(r, 422)
    r = world.http.post(url, json={"old": "alice", "new": "erin", "reason": "x"}, key=world.keys["alice"])
    assert_problem(r, 403)
    assert world.totals() == before


def test_revoked_link_answers_410(world: World) -> None:
    """An operator revokes a link (POST /v1/approvals/links/{id}/revoke); using it answers 410 revoked."""
    run = world.start()
    link = world.mint(run, "alice")
    r = world.http.post(
        f"/v1/approvals/links/{link['link_id']}/revoke", json={"reason": "resent"}, key=world.keys["op"]
    )
    assert r.status_code == 200, r.text
    revoked = next(e for e in world.events(run) if e["type"] == "ApprovalLinkRevoked")
    assert (revoked["data"]["reason"], revoked["data"]["actor"]) == ("resent", "op")
    before = world.totals()
    assert_problem(world.decide(link["token"], "alice"), 410, "revoked")
    assert world.totals() == before
    assert world.decide(world.mint(run, "alice")["token"], "alice").status_code == 200
    listed = world.http.get(f"/v1/runs/{run}/approvals/links", key=world.keys["op"]).json()
    assert {x["link_id"]: x["status"] for x in listed}[link["link_id"]] == "revoked"
    assert all("token" not in x and "token_hash" not in x for x in listed)
    assert link["token"] not in str(listed)


@pytest.mark.parametrize(
    ("new", "initiator", "why"),
    [("frank", "op", "approver role"), ("erin", "erin", "initiator")],
    ids=["no-approver-role", "the-initiator"],
)
def test_reassign_refuses_a_replacement_who_cannot_decide(
    world: World, new: str, initiator: str, why: str
) -> None:
    """Replacing alice by someone who could never decide (no approver role, or the run's initiator while
    allow_initiator is false) is a 422 and appends nothing, instead of leaving a seat nobody can fill."""
    run = world.start(actor=initiator)
    before = world.totals()
    r = world.http.post(
        f"/v1/runs/{run}/approvals/{STEP}/reassign",
        json={"old": "alice", "new": new, "reason": "alice left"},
        key=world.keys["op"],
    )
    body = assert_problem(r, 422, "invalid_input")
    assert new in body["detail"]
    assert why in body["detail"]
    assert world.totals() == before
    assert "ApproverReplaced" not in world.types(run)
    assert "{alice, bob, finance}" in world.show(run)["wait_reason"]


def test_reassign_to_the_initiator_is_allowed_when_the_policy_allows_it(world: World) -> None:
    """With allow_initiator: true the run's initiator is a valid replacement and can then decide."""
    world.publish(po_definition("po-self", allow_initiator=True))
    run = world.start("po-self", actor="dave")
    r = world.http.post(
        f"/v1/runs/{run}/approvals/{STEP}/reassign",
        json={"old": "alice", "new": "dave", "reason": "alice left"},
        key=world.keys["op"],
    )
    assert r.status_code == 200, r.text
    ok = world.decide(world.mint(run, "dave")["token"], "dave")
    assert ok.status_code == 200, ok.text
