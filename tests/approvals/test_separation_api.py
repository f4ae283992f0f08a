"""Separation of duties through the API and the UI: the attacks of issue 14 (finding 5, and the history
limits of finding 6) as an operator, an approver and a worker would try them. Each is refused with a
problem document and changes nothing, or (history limits) leaves the run's history bounded."""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from lockstep.core.limits import DEFAULT_SERVER_LIMITS

from .conftest import (
    STEP,
    TENANT,
    FakeClock,
    World,
    assert_problem,
    csrf_of,
    open_world,
    po_definition,
)

MIGRATE = "/v1/runs/{run}/migrate"


def _v2(world: World) -> None:
    """Version 2 of `po`: the same approval step and payment, plus a step reachable only by name."""
    world.publish(po_definition(extra_steps=[{"id": "audit", "wait": "1h", "next": "end"}]))


def _user(world: World, name: str, roles: list[str], groups: list[str]) -> str:
    key: str = world.principals.create_user(TENANT, name, roles, groups).api_key
    world.keys[name] = key
    return key


def test_attack_migrate_maps_the_pending_approval_onto_the_payment(world: World) -> None:
    """POST migrate {"map": {"manager-approval": "pay"}} on a run waiting for approval: 409, the request
    stays, no payment task exists, nothing is appended."""
    run = world.start(amount=10)
    _v2(world)
    before = world.totals()
    r = world.http.post(
        MIGRATE.format(run=run),
        json={"to_version": 2, "map": {STEP: "pay"}, "reason": "skip the approval"},
        key=world.keys["op"],
    )
    body = assert_problem(r, 409, "incompatible")
    assert "only its policy or a cancel can end" in body["detail"]
    assert world.totals() == before
    assert world.show(run)["wait_kind"] == "approval"
    assert world.sql("SELECT COUNT(*) FROM tasks WHERE run_id = ?", run) == [(0,)]


def test_migrate_keeps_the_pending_request_and_its_decisions(world: World) -> None:
    """Migrating to v2 (same approval step) carries the request: alice's approval counts, bob completes
    the quorum, and the payment is scheduled only then."""
    run = world.start()
    _v2(world)
    assert world.decide(world.mint(run, "alice")["token"], "alice").status_code == 200
    r = world.http.post(
        MIGRATE.format(run=run), json={"to_version": 2, "reason": "new audit step"}, key=world.keys["op"]
    )
    assert r.status_code == 200, r.text
    assert r.json()["carried"] == [f"approval request {run}/{STEP}/r1 of {STEP}"]
    shown = world.show(run)
    assert shown["definition"]["version"] == 2
    assert "waiting for 1 more approval of 2" in shown["wait_reason"]
    assert world.decide(world.mint(run, "bob")["token"], "bob").status_code == 200
    assert world.show(run)["current_step"] == "pay"


def test_attack_operator_reassigns_a_seat_to_themself(world: World) -> None:
    """olga operates and approves (in finance): reassigning alice's seat to herself is 403; to erin, an
    approver outside the policy, 422; nothing is appended either time."""
    olga = _user(world, "olga", ["operator", "approver"], ["finance"])
    run = world.start()
    url = f"/v1/runs/{run}/approvals/{STEP}/reassign"
    before = world.totals()
    r = world.http.post(url, json={"old": "alice", "new": "olga", "reason": "alice away"}, key=olga)
    assert_problem(r, 403, "self_assignment")
    r = world.http.post(url, json={"old": "alice", "new": "erin", "reason": "alice away"}, key=olga)
    body = assert_problem(r, 422, "invalid_input")
    assert "does not satisfy the policy" in body["detail"]
    assert world.totals() == before
    assert "ApproverReplaced" not in world.types(run)


def test_attack_reassign_to_someone_who_already_decided(world: World) -> None:
    """carol (finance) approved; giving her alice's seat too is a 409: one seat per person."""
    run = world.start()
    assert world.decide(world.mint(run, "carol")["token"], "carol").status_code == 200
    r = world.http.post(
        f"/v1/runs/{run}/approvals/{STEP}/reassign",
        json={"old": "alice", "new": "carol", "reason": "x"},
        key=world.keys["op"],
    )
    assert_problem(r, 409, "already_decided")


def test_attack_edit_input_under_a_pending_approval(world: World) -> None:
    """Approvers see "10 EUR"; edit-input to 999,999 is a 409 and the details stay what they saw."""
    run = world.start(amount=10)
    assert world.decide(world.mint(run, "alice")["token"], "alice").status_code == 200
    before = world.totals()
    r = world.http.post(
        f"/v1/runs/{run}/edit-input",
        json={"input": {"po": "PO-1", "amount": 999_999}, "reason": "typo"},
        key=world.keys["op"],
    )
    assert_problem(r, 409, "approval_pending")
    assert world.totals() == before
    assert world.show(run)["input"]["amount"] == 10
    pending = world.http.get("/v1/approvals/inbox", key=world.keys["bob"]).json()
    assert [i["details"] for i in pending] == ["Approve PO PO-1 for 10 EUR"]


def test_four_eyes_skip_through_the_api(world: World) -> None:
    """On a four_eyes definition a skip is a proposal (shown by the run view); the proposer's own
    confirmation is a 409; a second operator's runs it; rejection/withdrawal over the API too."""
    op2 = _user(world, "op2", ["operator"], [])
    world.publish(
        {
            "name": "hold",
            "four_eyes": ["skip", "resolve", "migrate"],
            "steps": [{"id": "cool", "wait": "1d", "skippable": True}, {"id": "done", "succeed": {}}],
        }
    )
    run = world.engine.start("hold", input={}, tenant=TENANT, actor="op")
    r = world.http.post(
        f"/v1/runs/{run}/skip", json={"step": "cool", "reason": "customer called"}, key=world.keys["op"]
    )
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    assert out["events"] == ["RepairProposed"]
    pid = out["proposal"]["proposal_id"]
    shown = world.http.get(f"/v1/runs/{run}", key=world.keys["op"]).json()
    assert "awaits a second operator" in shown["wait_reason"]
    assert f"lockstep confirm RUN {pid}" in shown["next_action"]
    url = f"/v1/runs/{run}/proposals/{pid}"
    assert_problem(
        world.http.post(f"{url}/confirm", json={"reason": "me"}, key=world.keys["op"]), 409, "same_operator"
    )
    assert_problem(world.http.post(f"{url}/confirm", json={"reason": "x"}, key=world.keys["alice"]), 403)
    r = world.http.post(f"{url}/confirm", json={"reason": "checked"}, key=op2)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "completed"
    assert world.types(run)[-4:] == ["RepairConfirmed", "TimerCancelled", "StepSkipped", "RunCompleted"]
    again = world.engine.start("hold", input={}, tenant=TENANT, actor="op", key="second")
    pid = world.http.post(
        f"/v1/runs/{again}/skip", json={"step": "cool", "reason": "x"}, key=world.keys["op"]
    ).json()["proposal"]["proposal_id"]
    r = world.http.post(f"/v1/runs/{again}/proposals/{pid}/reject", json={"reason": "no"}, key=op2)
    assert r.status_code == 200, r.text
    assert world.types(again)[-1] == "RepairRejected"
    assert world.show(again)["steps"]["cool"]["status"] == "waiting"


def test_attack_inbox_review_clicked_10000_times_appends_nothing(world: World) -> None:
    """The inbox's Review mints no link: 10,000 clicks (and page loads) leave the history as it was, and
    dave still decides from the page (as himself, audited, no link)."""
    run = world.start()
    ui, csrf = world.ui("dave")
    seq = world.show(run)["seq"]
    started = time.monotonic()
    for _ in range(10_000):
        r = ui.post("/ui/approvals/open", data={"csrf": csrf, "run_id": run, "step": STEP})
        assert r.status_code == 303
    page = ui.get(r.headers["location"])
    assert page.status_code == 200
    assert time.monotonic() - started < 300
    assert world.show(run)["seq"] == seq
    assert world.sql("SELECT COUNT(*) FROM approval_links WHERE run_id = ?", run) == [(0,)]
    decided = ui.post(r.headers["location"], data={"csrf": csrf_of(page.text), "decision": "approve"})
    assert decided.status_code == 200, decided.text
    assert [d["approver"] for d in world.decisions(run)] == ["dave"]
    assert world.audit()[-1]["detail"]["channel"] == "inbox"
    again = ui.post(r.headers["location"], data={"csrf": csrf, "decision": "approve"})
    assert again.status_code == 409


def test_attack_operator_mints_links_without_bound(world: World) -> None:
    """Minting (and revoking) links for alice stops at the per-approver bound with a 409."""
    run = world.start()
    for _ in range(DEFAULT_SERVER_LIMITS["max_links_per_approver"]):
        link = world.mint(run, "alice")
        world.http.post(
            f"/v1/approvals/links/{link['link_id']}/revoke", json={"reason": "resend"}, key=world.keys["op"]
        )
    body = assert_problem(world.mint_response(run, "alice"), 409, "too_many_links")
    assert "inbox" in body["detail"]


def test_attack_worker_replays_a_stale_report_10000_times(world: World) -> None:
    """With max_history_events 40, a worker replaying a report with a stale fencing token 10,000 times
    gets 409 stale_result every time; the run records the first few as evidence, the rest are counted
    (not appended), it stays alive and its real attempt's report still completes it."""
    world.principals.set_tenant(TENANT, max_history_events=40)
    wkey = _user(world, "w", ["worker"], [])
    run = world.start()
    for who in ("alice", "bob"):
        assert world.decide(world.mint(run, who)["token"], who).status_code == 200
    polled = world.http.post(
        "/v1/tasks/poll", json={"activities": ["payments.charge"], "wait_seconds": 0}, key=wkey
    ).json()["tasks"]
    (task,) = polled
    url = f"/v1/tasks/{task['task_id']}/complete"
    stale = {"attempt": task["attempt"], "fencing_token": task["fencing_token"] - 1, "output": {"x": 1}}
    seq = world.show(run)["seq"]
    for _ in range(10_000):
        assert_problem(world.http.post(url, json=stale, key=wkey), 409, "stale_result")
    kept = DEFAULT_SERVER_LIMITS["max_ignored_results_per_attempt"]
    shown = world.show(run)
    assert (shown["seq"], shown["status"]) == (seq + kept, "running")
    assert world.service.unrecorded_results[TENANT] == 10_000 - kept
    assert world.types(run)[-kept:] == ["ResultIgnored"] * kept
    real = {"attempt": task["attempt"], "fencing_token": task["fencing_token"], "output": {"paid": True}}
    assert world.http.post(url, json=real, key=wkey).status_code == 200
    assert world.show(run)["status"] == "completed"


def test_lowered_history_limits_bind_links_and_stale_reports(tmp_path: Path) -> None:
    """With max_links_per_approver=2 and max_ignored_results_per_attempt=1 set for the server, the
    third link for alice is 409 too_many_links (the default allows five) and of three stale reports
    only the first is recorded (the default records three)."""
    limits = {"max_links_per_approver": 2, "max_ignored_results_per_attempt": 1}
    with ExitStack() as stack:
        world = open_world(tmp_path / "db.sqlite", FakeClock(), stack, server_limits=limits)
        world.publish(po_definition())
        run = world.start()
        for _ in range(2):
            link = world.mint(run, "alice")
            revoke = f"/v1/approvals/links/{link['link_id']}/revoke"
            world.http.post(revoke, json={"reason": "resend"}, key=world.keys["op"])
        body = assert_problem(world.mint_response(run, "alice"), 409, "too_many_links")
        assert "2 links were already minted" in body["detail"]
        run = world.start(po="PO-2")
        for who in ("alice", "bob"):
            assert world.decide(world.mint(run, who)["token"], who).status_code == 200
        wkey = _user(world, "w", ["worker"], [])
        poll = {"activities": ["payments.charge"], "wait_seconds": 0}
        (task,) = world.http.post("/v1/tasks/poll", json=poll, key=wkey).json()["tasks"]
        url = f"/v1/tasks/{task['task_id']}/complete"
        stale = {"attempt": task["attempt"], "fencing_token": task["fencing_token"] - 1, "output": {}}
        seq = world.show(run)["seq"]
        for _ in range(3):
            assert_problem(world.http.post(url, json=stale, key=wkey), 409, "stale_result")
        assert world.show(run)["seq"] == seq + 1
        assert world.service.unrecorded_results[TENANT] == 2


def test_review_page_shows_nothing_to_approvers_outside_the_policy(world: World) -> None:
    """erin (an approver nobody named) cannot read the request's details by guessing the review URL, nor
    decide there; nothing is appended."""
    run = world.start(po="PO-SECRET")
    ui, csrf = world.ui("erin")
    seq = world.show(run)["seq"]
    page = ui.get(f"/ui/approvals/{run}/{STEP}")
    assert page.status_code == 409
    assert "PO-SECRET" not in page.text
    r = ui.post(f"/ui/approvals/{run}/{STEP}", data={"csrf": csrf, "decision": "approve"})
    assert r.status_code == 403
    assert world.show(run)["seq"] == seq
    assert world.audit()[-1]["outcome"] == "refused"
