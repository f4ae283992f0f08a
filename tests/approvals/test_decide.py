"""POST /v1/approvals/decide: single use under concurrency, replay, expiry, binding to one approver,
authorization re-checked at submit time, the initiator rule, quorum deduplication, unknown tokens."""

from __future__ import annotations

import hashlib
import secrets
import threading
from datetime import timedelta
from typing import Any

import httpx
import pytest

from lockstep.app.views import DecisionResult
from lockstep.core.timeutil import iso
from lockstep.errors import Conflict, Forbidden

from .conftest import STEP, TENANT, World, assert_problem, po_definition


def race(n: int, action: Any) -> list[Any]:
    """Run `action(i)` in n threads released together by a barrier; results (or exceptions) in order."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n

    def go(i: int) -> None:
        barrier.wait(timeout=10)
        try:
            results[i] = action(i)
        except Exception as exc:  # the caller inspects refusals
            results[i] = exc

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    return results


# --- double click and replay -----------------------------------------------------------------------


@pytest.mark.parametrize("decisions", [("approve", "approve"), ("approve", "reject")])
def test_double_click_over_the_api_decides_once(world: World, decisions: tuple[str, str]) -> None:
    """Two simultaneous POSTs with one token: one 200; the other 409 already_decided with the winner."""
    for round_ in range(4):  # several rounds, so the race is really run, not lucky once
        run = world.start(po=f"PO-{round_}")
        link = world.mint(run, "alice")
        seen = len(world.audit())
        results: list[httpx.Response] = race(
            2, lambda i, link=link: world.decide(link["token"], "alice", decisions[i])
        )
        codes = sorted(r.status_code for r in results)
        assert codes == [200, 409], [r.text for r in results]
        ok = next(r for r in results if r.status_code == 200).json()
        refused = assert_problem(next(r for r in results if r.status_code == 409), 409, "already_decided")
        assert refused["decision"]["approver"] == "alice"
        assert refused["decision"]["decision"] == ok["decision"]
        recorded = world.decisions(run, "alice")
        assert len(recorded) == 1
        assert recorded[0]["decision"] == ok["decision"]
        assert world.link_status(link["link_id"]) == "used"
        # Both requests and the identity behind them stay in the audit trail.
        mine = world.audit()[seen:]
        assert [a["actor"] for a in mine] == ["alice", "alice"]
        assert sorted((a["outcome"], a["detail"].get("code")) for a in mine) == [
            ("ok", None),
            ("refused", "already_decided"),
        ]


def test_double_click_through_the_service_decides_once(world: World) -> None:
    """Eight threads deciding with one token through Approvals.decide: one succeeds, seven get Conflict."""
    run = world.start()
    link = world.mint(run, "carol")
    carol = world.principal("carol")
    results = race(8, lambda _i: world.approvals.decide(carol, link["token"], "approve", channel="api"))
    ok = [r for r in results if isinstance(r, DecisionResult)]
    refused = [r for r in results if isinstance(r, Conflict)]
    assert len(ok) == 1, results
    assert len(refused) == 7, results
    assert {r.code for r in refused} == {"already_decided"}
    assert len(world.decisions(run, "carol")) == 1
    assert [a["outcome"] for a in world.audit()].count("ok") == 1
    assert [a["outcome"] for a in world.audit()].count("refused") == 7


def test_same_approver_two_links_at_once_decides_once(world: World) -> None:
    """alice submitting two different links of hers at the same moment: one 200, one 409; one decision."""
    for round_ in range(3):
        run = world.start(po=f"PO-{round_}")
        links = [world.mint(run, "alice"), world.mint(run, "alice")]
        results = race(2, lambda i, links=links: world.decide(links[i]["token"], "alice", "approve"))
        assert sorted(r.status_code for r in results) == [200, 409], [r.text for r in results]
        refused = next(r for r in results if r.status_code == 409)
        assert assert_problem(refused, 409, "already_decided")["decision"]["decision"] == "approve"
        assert len(world.decisions(run, "alice")) == 1
        assert world.show(run)["status"] == "waiting"


def test_distinct_approvers_at_once_advance_the_run_once(world: World) -> None:
    """Three approvers deciding at the same moment on a quorum of two: one ApprovalGranted, one advance."""
    who = ["alice", "bob", "carol"]
    for round_ in range(3):
        run = world.start(po=f"PO-{round_}")
        links = [world.mint(run, w) for w in who]
        results = race(3, lambda i, links=links: world.decide(links[i]["token"], who[i]))
        codes = sorted(r.status_code for r in results)
        # The third comes after the request closed: its link was revoked with the request (410).
        assert codes == [200, 200, 410], [r.text for r in results]
        types = world.types(run)
        assert types.count("ApprovalDecisionRecorded") == 2
        assert types.count("ApprovalGranted") == 1
        assert types.count("ActivityScheduled") == 1
        assert world.show(run)["current_step"] == "pay"


def test_replay_after_success_is_409_and_appends_nothing(world: World) -> None:
    """Re-sending a used token answers 409 already_decided with the original decision and writes no event."""
    run = world.start()
    link = world.mint(run, "alice")
    first = world.decide(link["token"], "alice", "approve", comment="fine by me")
    assert first.status_code == 200, first.text
    before = world.totals()
    for decision in ("approve", "reject"):
        body = assert_problem(world.decide(link["token"], "alice", decision), 409, "already_decided")
        assert body["decision"] == {"approver": "alice", "decision": "approve", "at": iso(world.clock.now)}
    assert world.totals() == before
    assert world.show(run)["status"] == "waiting"


# --- expiry, binding, identity -----------------------------------------------------------------------


def test_expired_link_is_410_and_appends_nothing(world: World) -> None:
    """A link used after its expiry answers 410 expired; the run and the link stay as they were."""
    run = world.start()
    link = world.mint(run, "alice", expires_in="1h")
    assert link["expires_at"] == iso(world.clock.now + timedelta(hours=1))
    world.clock.advance(hours=1)  # expiry is exclusive: at expires_at the link is already dead
    before = world.totals()
    assert_problem(world.decide(link["token"], "alice"), 410, "expired")
    assert world.totals() == before
    assert world.link_status(link["link_id"]) == "pending"
    assert world.show(run)["status"] == "waiting"


def test_link_expiry_never_exceeds_the_step_timeout(world: World) -> None:
    """Asking for a link longer than the step timeout caps it at the request's expiry (3 days)."""
    run = world.start()
    link = world.mint(run, "alice", expires_in="30d")
    assert link["expires_at"] == iso(world.clock.now + timedelta(days=3))


def test_link_of_alice_used_with_bobs_key_is_403(world: World) -> None:
    """bob cannot use alice's link (403 not_bound) even though he is an approver; alice still can."""
    run = world.start()
    link = world.mint(run, "alice")
    before = world.totals()
    body = assert_problem(world.decide(link["token"], "bob"), 403, "not_bound")
    assert "alice" in body["detail"]
    assert world.totals() == before
    assert world.link_status(link["link_id"]) == "pending"
    assert world.decide(link["token"], "alice").status_code == 200


def test_approver_removed_from_group_after_request_is_refused(world: World) -> None:
    """Group membership is read at submit time: carol, out of finance, is refused with her earlier link."""
    run = world.start()
    link = world.mint(run, "carol")  # minted while carol is in finance
    world.principals.set_membership(TENANT, "carol", groups=[])
    before = world.totals()
    body = assert_problem(world.decide(link["token"], "carol"), 403, "not_an_approver")
    assert "carol" in body["detail"]
    assert world.totals() == before
    assert world.link_status(link["link_id"]) == "pending"  # the consume rolled back with the refusal
    # Back in the group, the same link works: the check is live, not a one-way latch.
    world.principals.set_membership(TENANT, "carol", groups=["finance"])
    ok = world.decide(link["token"], "carol")
    assert ok.status_code == 200, ok.text
    recorded = world.decisions(run, "carol")
    assert [(d["groups"], d["roles"]) for d in recorded] == [(["finance"], ["approver", "viewer"])]


def test_approver_role_removed_after_request_is_refused(world: World) -> None:
    """Losing the approver role before submitting refuses the decision (403); nothing is written."""
    run = world.start()
    link = world.mint(run, "alice")
    world.principals.set_membership(TENANT, "alice", roles=["viewer"])
    before = world.totals()
    assert_problem(world.decide(link["token"], "alice"), 403)
    assert world.totals() == before


def test_disabled_user_gets_401_and_cannot_decide(world: World) -> None:
    """A disabled approver's key answers 401; a principal read before the disabling is refused too."""
    run = world.start()
    link = world.mint(run, "alice")
    stale = world.principal("alice")
    world.principals.disable_user(TENANT, "alice")
    before = world.totals()
    assert_problem(world.decide(link["token"], "alice"), 401, "unauthenticated")
    with pytest.raises(Forbidden) as refused:
        world.approvals.decide(stale, link["token"], "approve")
    assert refused.value.code == "disabled"
    assert world.totals() == before
    assert world.link_status(link["link_id"]) == "pending"
    assert world.decisions(run) == []


def test_minting_for_a_disabled_user_is_refused(world: World) -> None:
    """No link is minted for a disabled user (422), so nothing is stored for them."""
    run = world.start()
    world.principals.disable_user(TENANT, "bob")
    before = world.totals()
    assert_problem(world.mint_response(run, "bob"), 422)
    assert world.totals() == before


# --- the initiator rule ----------------------------------------------------------------------------


def _forge_link(world: World, run: str, approver: str) -> str:
    """Store a pending link for `approver` directly (as if issued before a rule changed); return its token."""
    token = secrets.token_urlsafe(32)
    state = world.service.state(TENANT, run)
    with world.service.write() as tx:
        tx.insert_link(
            {
                "link_id": "lnk_" + secrets.token_hex(8),
                "tenant": TENANT,
                "run_id": run,
                "step": STEP,
                "request_id": state.approval["request_id"],
                "approver": approver,
                "expires_at": int((world.clock.now + timedelta(days=1)).timestamp() * 1000),
                "created_at": iso(world.clock.now),
            },
            hashlib.sha256(token.encode()).hexdigest(),
        )
    world.minted.append(token)
    return token


def test_initiator_cannot_approve_own_run(world: World) -> None:
    """A run started by alice: no link is minted for her, no inbox entry, and a decision is 403 initiator."""
    run = world.start(actor="alice")
    assert_problem(world.mint_response(run, "alice"), 409, "initiator")
    inbox = world.http.get("/v1/approvals/inbox", key=world.keys["alice"])
    assert inbox.status_code == 200
    assert inbox.json() == []
    token = _forge_link(world, run, "alice")  # even a link that exists does not let her decide
    before = world.totals()
    body = assert_problem(world.decide(token, "alice"), 403, "initiator")
    assert "alice" in body["detail"]
    assert world.totals() == before
    assert world.decisions(run) == []


def test_initiator_may_approve_when_the_policy_allows_it(world: World) -> None:
    """With allow_initiator: true, the run's initiator gets a link and her approval counts."""
    world.publish(po_definition("po-self", allow_initiator=True))
    run = world.start("po-self", actor="alice")
    link = world.mint(run, "alice")
    r = world.decide(link["token"], "alice")
    assert r.status_code == 200, r.text
    assert [d["approver"] for d in world.decisions(run)] == ["alice"]


# --- quorum ----------------------------------------------------------------------------------------


def test_quorum_of_two_counts_one_decision_per_person(world: World) -> None:
    """alice approving twice (two links) counts once; only bob's approval meets the quorum and moves on."""
    run = world.start()
    first, second = world.mint(run, "alice"), world.mint(run, "alice")
    ok = world.decide(first["token"], "alice")
    assert ok.status_code == 200, ok.text
    assert ok.json()["request_status"] == "pending"
    before = world.totals()
    body = assert_problem(world.decide(second["token"], "alice"), 409, "already_decided")
    assert body["decision"]["decision"] == "approve"
    assert_problem(world.mint_response(run, "alice"), 409, "already_decided")
    assert world.totals() == before
    shown = world.show(run)
    assert (shown["status"], shown["current_step"]) == ("waiting", STEP)
    assert "ApprovalGranted" not in world.types(run)

    done = world.decide(world.mint(run, "bob")["token"], "bob")
    assert done.status_code == 200, done.text
    assert done.json()["request_status"] == "approved"
    types = world.types(run)
    assert types.count("ApprovalDecisionRecorded") == 2
    granted = next(e for e in world.events(run) if e["type"] == "ApprovalGranted")
    assert granted["data"]["approvers"] == ["alice", "bob"]
    assert types[types.index("ApprovalGranted") - 1] == "TimerCancelled"  # the timeout is made stale
    assert types[-1] == "ActivityScheduled"
    shown = world.show(run)
    assert (shown["status"], shown["current_step"]) == ("running", "pay")
    assert shown["steps"][STEP]["status"] == "succeeded"
    assert world.link_status(second["link_id"]) == "revoked"  # settled: other open links are closed


def test_group_members_count_towards_the_quorum(world: World) -> None:
    """Two members of finance (no named user) meet a quorum of two."""
    run = world.start()
    for who in ("carol", "dave"):
        r = world.decide(world.mint(run, who)["token"], who)
        assert r.status_code == 200, r.text
    assert world.show(run)["current_step"] == "pay"


# --- unknown and malformed tokens --------------------------------------------------------------------


MALFORMED = [
    "x",
    "not a token",
    "A" * 42,
    "A" * 44,
    "!" * 43,
    "'; DROP TABLE approval_links; --",
    "\u00e9" * 43,
    "A" * 200,
]


def test_unknown_and_malformed_tokens_get_the_same_404(world: World) -> None:
    """Unknown, malformed and other-tenant tokens all answer one identical 404 problem."""
    run = world.start()
    world.mint(run, "alice")
    world.principals.create_tenant("globex")
    # Another tenant's user with the very same name as the approver the link is bound to.
    foreign_key = world.principals.create_user("globex", "bob", ["approver"], ["finance"]).api_key
    before = world.totals()
    answers = [world.decide(secrets.token_urlsafe(32), "alice")]
    answers += [world.decide(token, "alice") for token in MALFORMED]
    # A real acme token for bob, presented by bob of another tenant, is just as unknown.
    real = world.mint(run, "bob")["token"]
    answers.append(
        world.http.post("/v1/approvals/decide", json={"token": real, "decision": "approve"}, key=foreign_key)
    )
    bodies = [assert_problem(r, 404, "unknown_link") for r in answers]
    assert len({(b["type"], b["title"], b["detail"]) for b in bodies}) == 1, bodies
    assert world.totals() == {
        **before,
        "events": before["events"] + 1,
        "links_pending": before["links_pending"] + 1,
    }


@pytest.mark.parametrize("state", ["used", "revoked", "expired", "pending"])
def test_someone_elses_link_is_not_bound_whatever_its_state(world: World, state: str) -> None:
    """bob presenting alice's link is refused as not his (403 not_bound) before anything else: whether
    the link is spent (used, revoked, expired) or not, he learns nothing of its state or decision."""
    run = world.start()
    link = world.mint(run, "alice", expires_in="1h")
    if state == "used":
        assert world.decide(link["token"], "alice", "reject", comment="no budget").status_code == 200
    elif state == "revoked":
        r = world.http.post(
            f"/v1/approvals/links/{link['link_id']}/revoke", json={"reason": "resent"}, key=world.keys["op"]
        )
        assert r.status_code == 200, r.text
    elif state == "expired":
        world.clock.advance(hours=2)
    before = world.totals()
    body = assert_problem(world.decide(link["token"], "bob"), 403, "not_bound")
    assert "decision" not in body
    for secret in ("reject", "no budget", "used", "revoked", "expired"):
        assert secret not in body["detail"], body["detail"]
    assert world.totals() == before
    assert world.link_status(link["link_id"]) == ("pending" if state == "expired" else state)


@pytest.mark.parametrize("token", ["", "A" * 201, "A" * 5000], ids=["empty", "201-chars", "5000-chars"])
def test_tokens_of_any_length_get_the_unknown_link_404(world: World, token: str) -> None:
    """A token of any length that is not a link gets the same 404 unknown_link as any other."""
    world.start()
    reference = assert_problem(world.decide(secrets.token_urlsafe(32), "alice"), 404, "unknown_link")
    body = assert_problem(world.decide(token, "alice"), 404, "unknown_link")
    assert body["detail"] == reference["detail"]


def test_a_decision_and_its_audit_row_commit_together(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ok audit row is written in the decision's transaction: if it fails, the decision never happened."""
    run = world.start()
    link = world.mint(run, "carol")
    carol = world.principal("carol")
    decisions = world.approvals.decide.__self__  # type: ignore[attr-defined]
    real = decisions.audit.record

    def record_then_fail(*args: Any, **kw: Any) -> None:
        real(*args, **kw)
        raise RuntimeError("disk full while writing the audit row")

    monkeypatch.setattr(decisions.audit, "record", record_then_fail)
    with pytest.raises(RuntimeError):
        world.approvals.decide(carol, link["token"], "approve", channel="api")
    assert world.link_status(link["link_id"]) != "used"
    assert world.decisions(run, "carol") == []
    assert [a["outcome"] for a in world.audit()] == []

    monkeypatch.setattr(decisions.audit, "record", real)
    result = world.approvals.decide(carol, link["token"], "approve", channel="api")
    ok = [a for a in world.audit() if a["outcome"] == "ok"]
    assert len(ok) == 1
    assert ok[0]["detail"]["request_id"] == result.request_id
    assert ok[0]["detail"]["channel"] == "api"
    assert len(world.decisions(run, "carol")) == 1
