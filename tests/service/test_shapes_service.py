"""Parallel and for-each runs through the application service on both backends: several tasks of one
run queued and leased at once, results in any order, the join recorded once, approvals pending side by
side in the inbox, cancellation with attempts in flight, and every run verifying (fold == snapshot)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import yaml

from lockstep.app.service import Service
from lockstep.errors import Forbidden

from .conftest import FakeClock

TTL = timedelta(seconds=30)

REVIEW: dict[str, Any] = yaml.safe_load(
    """
name: review
steps:
  - id: prepare
    activity: docs.prepare
    timeout: 30s
    compensate: {activity: docs.discard}
  - id: review
    parallel:
      branches:
        legal:
          - {id: check, activity: legal.check, timeout: 30s, compensate: {activity: legal.uncheck}}
        finance:
          - {id: budget, activity: finance.budget, timeout: 30s, compensate: {activity: finance.release}}
  - id: ship
    activity: shipping.create
    timeout: 30s
    input: {review: "${steps.review.output}"}
"""
)

LINES: dict[str, Any] = yaml.safe_load(
    """
name: lines
steps:
  - id: lines
    for_each:
      items: "${input.lines}"
      concurrency: 2
      max_items: 10
      body:
        - {id: pack, activity: wh.pack, timeout: 30s, input: {sku: "${item}", i: "${index}"}}
"""
)

APPROVE: dict[str, Any] = yaml.safe_load(
    """
name: two-approvals
steps:
  - id: approvals
    parallel:
      branches:
        legal:
          - {id: legal-ok, approval: {approvers: {users: [alice]}, timeout: 1d, details: "legal"}}
        finance:
          - {id: finance-ok, approval: {approvers: {users: [bob]}, timeout: 1d, details: "finance"}}
"""
)


def leases(svc: Service, activities: list[str], limit: int = 10) -> dict[str, Any]:
    return {x.step: x for x in svc.claim("w1", activities, limit=limit, lease_ttl=TTL)}


def done(svc: Service, lease: Any, output: Any = None) -> None:
    assert svc.complete(lease.task_id, lease.attempt, lease.fencing, output) == "accepted"


def test_branches_are_queued_and_leased_together_and_join_once(svc: Service) -> None:
    """Both branches' tasks are ready at once and one claim leases both; the results in any order end
    the parallel step once, and the next step gets the branches' outputs."""
    svc.publish("acme", REVIEW)
    run = svc.start("acme", "review", input={}).run_id
    done(svc, leases(svc, ["docs.prepare"])["prepare"])
    both = leases(svc, ["legal.check", "finance.budget"])
    assert set(both) == {"review.legal.check", "review.finance.budget"}
    view = svc.show("acme", run)
    assert view.status == "running"
    assert view.current_step == "review"
    done(svc, both["review.finance.budget"], {"b": 1})
    done(svc, both["review.legal.check"], {"l": 1})
    (ship,) = leases(svc, ["shipping.create"]).values()
    assert ship.input == {"review": {"legal": {"l": 1}, "finance": {"b": 1}}}
    done(svc, ship)
    types = [e.type for e in svc.events("acme", run)]
    assert types.count("JoinDecided") == 1
    assert types.count("StepJoined") == 1
    assert svc.show("acme", run).status == "completed"
    assert all(r.ok for r in svc.verify(run, "acme"))


def test_a_failed_branch_compensates_every_branch_through_the_queue(svc: Service) -> None:
    """A failing branch fails the step; the completed branch's compensation and, after it, the first
    step's are queued as tasks and the run ends failed."""
    svc.publish("acme", REVIEW)
    run = svc.start("acme", "review", input={}).run_id
    done(svc, leases(svc, ["docs.prepare"])["prepare"])
    both = leases(svc, ["legal.check", "finance.budget"])
    done(svc, both["review.legal.check"])
    lease = both["review.finance.budget"]
    svc.fail(lease.task_id, lease.attempt, lease.fencing, "NoMoney", "no money", retryable=False)
    comp = leases(svc, ["legal.uncheck", "docs.discard"])
    assert set(comp) == {"review.legal.check"}  # prepare waits for the branch
    done(svc, comp["review.legal.check"])
    done(svc, leases(svc, ["docs.discard"])["prepare"])
    assert svc.show("acme", run).status == "failed"
    assert all(r.ok for r in svc.verify(run, "acme"))


def test_for_each_keeps_its_concurrency_in_the_queue(svc: Service) -> None:
    """Only two items' tasks are ready at a time, whatever a worker asks for."""
    svc.publish("acme", LINES)
    run = svc.start("acme", "lines", input={"lines": ["a", "b", "c", "d"]}).run_id
    first = leases(svc, ["wh.pack"])
    assert set(first) == {"lines[0].pack", "lines[1].pack"}
    assert first["lines[1].pack"].input == {"sku": "b", "i": 1}
    assert leases(svc, ["wh.pack"]) == {}
    done(svc, first["lines[1].pack"], 1)
    nxt = leases(svc, ["wh.pack"])
    assert set(nxt) == {"lines[2].pack"}
    done(svc, first["lines[0].pack"], 0)
    done(svc, nxt["lines[2].pack"], 2)
    done(svc, leases(svc, ["wh.pack"])["lines[3].pack"], 3)
    view = svc.show("acme", run)
    assert view.status == "completed"
    assert view.output == [0, 1, 2, 3]


def test_cancel_with_branch_attempts_in_flight_waits_for_them(svc: Service) -> None:
    """A cancel records intent, closes what no worker took and waits for the leased attempts."""
    svc.publish("acme", REVIEW)
    run = svc.start("acme", "review", input={}).run_id
    done(svc, leases(svc, ["docs.prepare"])["prepare"])
    check = leases(svc, ["legal.check"])["review.legal.check"]
    svc.cancel("acme", run, "customer withdrew", "ops")
    assert svc.show("acme", run).status == "cancelling"
    assert leases(svc, ["finance.budget"]) == {}  # withdrawn: no worker may take it
    done(svc, check)
    comp = leases(svc, ["legal.uncheck"])
    done(svc, comp["review.legal.check"])
    done(svc, leases(svc, ["docs.discard"])["prepare"])
    assert svc.show("acme", run).status == "cancelled"
    assert all(r.ok for r in svc.verify(run, "acme"))


@pytest.fixture
def approvers(svc: Service) -> Service:
    svc.principals.create_tenant("acme")
    for who in ("alice", "bob", "carol"):
        svc.principals.create_user("acme", who, ["approver"], [])
    return svc


def test_approvals_in_branches_are_in_the_inbox_side_by_side(approvers: Service) -> None:
    """Each approver sees their own branch's request; deciding one leaves the other pending; both
    decided complete the run. A decision on the other branch's request is refused."""
    svc = approvers
    svc.publish("acme", APPROVE)
    run = svc.start("acme", "two-approvals", input={}).run_id
    alice = svc.principals.principal("acme", "alice")
    bob = svc.principals.principal("acme", "bob")
    assert alice is not None
    assert bob is not None
    (mine,) = svc.approvals.inbox(alice)
    (theirs,) = svc.approvals.inbox(bob)
    assert mine.step == "approvals.legal.legal-ok"
    assert theirs.step == "approvals.finance.finance-ok"
    with pytest.raises(Forbidden):  # the session is alice's; the finance request names bob only
        svc.approvals.decide_in_session(alice, run, theirs.step, "approve", "not mine")
    svc.approvals.decide_in_session(alice, run, mine.step, "approve", "ok")
    assert svc.show("acme", run).status == "waiting"
    assert "branch legal: done" in (svc.show("acme", run).wait_reason or "")
    svc.approvals.decide_in_session(bob, run, theirs.step, "approve", "ok")
    assert svc.show("acme", run).status == "completed"
    assert all(r.ok for r in svc.verify(run, "acme"))


def test_timers_of_branches_fire_through_the_scheduler(svc: Service, clock: FakeClock) -> None:
    """An approval's timeout in a branch is a durable timer fired by the sweep like any other."""
    svc.publish("acme", APPROVE)
    run = svc.start("acme", "two-approvals", input={}).run_id
    clock.advance(days=2)
    assert svc.fire_due_timers() >= 1
    view = svc.show("acme", run)
    assert view.status == "failed"
    assert all(r.ok for r in svc.verify(run, "acme"))
