"""Parallel and for-each steps in the pure core: lanes side by side, joins (all, any, n_of), failures
with and without on_failure: continue, cancellation and compensation across branches, approvals and
timers in branches, pause and resume, and every history folding to the same state it was decided on."""

from __future__ import annotations

import pytest
import yaml
from corekit import load, types
from shapekit import LaneRun

from lockstep.core.commands import PauseRun, Rejected, ReportSuccess, ResumeRun, SkipStep
from lockstep.core.definition import Definition, DefinitionError, Limits, parse_definition
from lockstep.core.explain import explain
from lockstep.core.lanes import approvals, attempts

REVIEW = """
name: review
steps:
  - id: prepare
    activity: docs.prepare
    timeout: 30s
    compensate: {activity: docs.discard}
  - id: review
    parallel:
      join: JOIN
      branches:
        legal:
          - id: check
            activity: legal.check
            timeout: 30s
            compensate: {activity: legal.uncheck}
          - id: sign
            activity: legal.sign
            timeout: 30s
            compensate: {activity: legal.unsign}
        finance:
          - id: budget
            activity: finance.budget
            timeout: 30s
            compensate: {activity: finance.release}
        ops:
          - id: staff
            activity: ops.staff
            timeout: 30s
  - id: ship
    activity: shipping.create
    timeout: 30s
    input: {review: "${steps.review.output}"}
"""


def review(join: str = "all") -> LaneRun:
    return LaneRun(load(REVIEW.replace("JOIN", join)), {"order": 7})


def test_join_all_runs_every_branch_at_once_and_maps_their_outputs() -> None:
    """All three branches' first attempts are queued together; the step's output maps branch ids to the
    branches' last outputs, and the next step reads it."""
    r = review()
    r.ok("prepare", {"doc": 1})
    assert r.open_steps() == ["review.finance.budget", "review.legal.check", "review.ops.staff"]
    assert r.s.status == "running"
    assert r.s.current_step == "review"
    r.ok("review.finance.budget", {"budget": 100})
    r.ok("review.legal.check", {"ok": True})
    assert r.open_steps() == ["review.legal.sign", "review.ops.staff"]
    r.ok("review.ops.staff", {"staff": 2})
    assert "StepJoined" not in types(r.events)
    r.ok("review.legal.sign", {"signed": True})
    joined = [e.data for e in r.events if e.type == "StepJoined"]
    assert len(joined) == 1
    assert joined[0].succeeded == 3
    assert r.s.steps["review"].output == {
        "legal": {"signed": True},
        "finance": {"budget": 100},
        "ops": {"staff": 2},
    }
    assert r.attempt("ship").step == "ship"
    r.ok("ship", {"tracking": "T1"})
    assert r.s.status == "completed"
    assert [e.data.outcome for e in r.events if e.type == "JoinDecided"] == ["succeeded"]


def test_a_branch_step_sees_its_own_steps_and_those_before_never_a_sibling_branch() -> None:
    """Expressions in a branch read the steps of their own branch and of the lanes around it; a read of
    a sibling branch is refused at publish and, in a version stored before that check, fails the step."""
    d = load_stored(SCOPE)
    with pytest.raises(DefinitionError, match="on another branch of `both`"):
        parse_definition(yaml.safe_load(SCOPE))
    _check_scope(d)


SCOPE = """
name: scope
steps:
  - id: first
    activity: a.first
    timeout: 5s
  - id: both
    parallel:
      branches:
        left:
          - {id: l1, activity: a.l1, timeout: 5s}
          - id: l2
            activity: a.l2
            timeout: 5s
            input: {mine: "${steps.l1.output}", before: "${steps.first.output}"}
        right:
          - {id: r1, activity: a.r1, timeout: 5s}
          - {id: r2, activity: a.r2, timeout: 5s, input: {other: "${steps.l1.output}"}}
"""


def load_stored(text: str) -> Definition:
    """A definition as a stored version is loaded: without the publish-time reference checks."""
    return parse_definition(yaml.safe_load(text), Limits(publish_checks=False))


def _check_scope(d: Definition) -> None:
    r = LaneRun(d, {})
    r.ok("first", "F")
    r.ok("both.left.l1", "L1")
    assert r.attempt("both.left.l2").step == "both.left.l2"
    scheduled = [e.data for e in r.events if e.type == "ActivityScheduled" and e.data.step == "both.left.l2"]
    assert scheduled[0].input == {"mine": "L1", "before": "F"}
    r.ok("both.right.r1", "R1")  # r2 reads l1, which is on another branch: not in its context
    failed = [e.data for e in r.events if e.type == "StepFailed"]
    assert failed
    assert failed[0].step == "both.right.r2"
    assert failed[0].error["code"] == "ExpressionError"


def test_join_any_takes_the_first_success_and_withdraws_the_others() -> None:
    """join any: the first branch to succeed decides; queued attempts are withdrawn, a running one
    reports first (its lane finishes cancelled), and then the step joins once."""
    r = review("any")
    r.ok("prepare")
    r.claim_step("review.ops.staff", "w2")  # in flight: must report before the step ends
    r.ok("review.finance.budget", {"budget": 5})
    decided = [e.data for e in r.events if e.type == "JoinDecided"]
    assert len(decided) == 1
    assert decided[0].outcome == "succeeded"
    assert set(decided[0].cancelling) == {"review.legal", "review.ops"}
    assert r.open_steps() == ["review.ops.staff"]  # legal's queued check was withdrawn
    assert "StepJoined" not in types(r.events)
    r.ok("review.ops.staff", {"late": True})
    assert [e.data.lane for e in r.events if e.type == "LaneFinished" and e.data.outcome == "cancelled"] == [
        "review.legal",
        "review.ops",
    ]
    assert r.s.steps["review"].output == {"legal": None, "finance": {"budget": 5}, "ops": None}
    assert r.s.steps["review.ops.staff"].status == "succeeded"  # its effect happened: recorded, compensable
    assert r.attempt("ship").attempt == 1


def test_n_of_fails_as_soon_as_it_can_no_longer_be_met() -> None:
    """n_of 3 of 3 with one tolerated failure cannot be met: the step fails without waiting."""
    d = load(
        REVIEW.replace("join: JOIN", "join: {n_of: 3}").replace(
            "        finance:\n          - id: budget",
            "        finance:\n          on_failure: continue\n          steps:\n          - id: budget",
        )
    )
    r = LaneRun(d, {})
    r.ok("prepare")
    r.bad("review.finance.budget", "NoMoney")
    decided = [e.data for e in r.events if e.type == "JoinDecided"]
    assert decided
    assert decided[0].outcome == "failed"
    assert "can still succeed" in decided[0].reason
    assert r.s.status == "compensating"  # prepare is undone


def test_a_failing_branch_cancels_its_siblings_and_compensates_every_branch_in_parallel() -> None:
    """A failure fails the parallel step once its siblings are settled; compensation then undoes each
    branch's completed steps in reverse order, branches side by side, and the steps before last."""
    r = review()
    r.ok("prepare", {"doc": 1})
    r.ok("review.legal.check")
    r.ok("review.legal.sign")
    r.ok("review.finance.budget")
    r.claim_step("review.ops.staff")
    assert r.s.current_step == "review"
    r.bad("review.ops.staff", "Nobody")
    assert r.s.status == "compensating"
    comps = sorted(a.step for a in attempts(r.s) if a.kind == "compensation")
    assert comps == ["review.finance.budget", "review.legal.sign"]  # both branches at once, sign before check
    r.ok("review.legal.sign")
    assert sorted(a.step for a in attempts(r.s)) == ["review.finance.budget", "review.legal.check"]
    r.ok("review.legal.check")
    assert [a.step for a in attempts(r.s)] == ["review.finance.budget"]  # prepare waits for all of review
    r.ok("review.finance.budget")
    assert [a.step for a in attempts(r.s)] == ["prepare"]
    r.ok("prepare")
    assert r.s.status == "failed"
    assert r.s.error is not None
    assert r.s.error["step"] == "review"


def test_on_failure_continue_lets_the_step_succeed_without_the_branch() -> None:
    """A branch with on_failure: continue may fail: the step still joins, its output null there."""
    d = load(
        REVIEW.replace("JOIN", "all").replace(
            "        ops:\n          - id: staff",
            "        ops:\n          on_failure: continue\n          steps:\n          - id: staff",
        )
    )
    r = LaneRun(d, {})
    r.ok("prepare")
    r.bad("review.ops.staff", "Nobody")
    r.ok("review.finance.budget", 1)
    r.ok("review.legal.check")
    r.ok("review.legal.sign", 2)
    assert r.s.steps["review"].output == {"legal": 2, "finance": 1, "ops": None}
    joined = next(e.data for e in r.events if e.type == "StepJoined")
    assert (joined.succeeded, joined.failed) == (2, 1)


def test_cancel_waits_for_in_flight_branch_attempts_then_compensates() -> None:
    """Cancelling a run inside a parallel step withdraws what nobody started, waits for the attempts in
    flight (each lane then finishes cancelled), and compensates the completed steps of every branch."""
    r = review()
    r.ok("prepare")
    r.ok("review.legal.check")
    r.claim_step("review.finance.budget")
    r.cancel()
    assert r.s.status == "cancelling"
    assert r.open_steps() == ["review.finance.budget"]
    assert {e.data.lane for e in r.events if e.type == "LaneFinished"} == {"review.legal", "review.ops"}
    r.ok("review.finance.budget")
    assert r.s.status == "compensating"
    assert sorted(a.step for a in attempts(r.s)) == ["review.finance.budget", "review.legal.check"]
    r.ok("review.finance.budget")
    r.ok("review.legal.check")
    r.ok("prepare")
    assert r.s.status == "cancelled"
    assert r.s.steps["review"].status == "cancelled"
    assert all(not ln.open for ln in r.s.lanes.values())


def test_stale_and_duplicate_reports_in_branches_are_evidence_only() -> None:
    """A second report of a branch attempt, or one with an old fencing token, changes nothing."""
    r = review()
    r.ok("prepare")
    a = r.claim_step("review.legal.check")
    assert a.fencing is not None
    r.ok("review.legal.check", 1)
    before = r.s.to_json()
    events = r.send(ReportSuccess(a.task_id, a.attempt, a.fencing, 2))
    assert types(events) == ["ResultIgnored"]
    assert {
        k: v
        for k, v in r.s.to_json().items()
        if k not in ("seq", "updated_at", "ignored_results", "ignored_by_task")
    } == {
        k: v
        for k, v in before.items()
        if k not in ("seq", "updated_at", "ignored_results", "ignored_by_task")
    }


APPROVALS = """
name: two-approvals
steps:
  - id: approvals
    parallel:
      branches:
        legal:
          - id: legal-ok
            approval: {approvers: {users: [alice]}, timeout: 1d, details: "legal"}
        finance:
          - id: finance-ok
            approval: {approvers: {users: [bob]}, timeout: 2d, details: "finance"}
          - id: book
            activity: finance.book
            timeout: 10s
"""


def test_approvals_in_branches_wait_side_by_side_and_explain_says_so() -> None:
    """Two requests are pending at once, each with its timer; explain names each branch."""
    r = LaneRun(load(APPROVALS), {}, actor="carol")
    assert [a["step"] for a in approvals(r.s)] == ["approvals.finance.finance-ok", "approvals.legal.legal-ok"]
    assert set(r.s.timers) == {"approval:approvals.legal.legal-ok", "approval:approvals.finance.finance-ok"}
    why = explain(r.s, r.now)
    assert why["wait_kind"] == "approval"
    assert "branch legal: approval from alice" in (why["wait_reason"] or "")
    assert "branch finance: approval from bob" in (why["wait_reason"] or "")
    r.decide_as("approvals.legal.legal-ok", "alice")
    why = explain(r.s, r.now)
    assert "branch legal: done" in (why["wait_reason"] or "")
    with pytest.raises(Rejected):  # alice is not an approver of finance's request
        r.decide_as("approvals.finance.finance-ok", "alice")
    r.decide_as("approvals.finance.finance-ok", "bob")
    r.ok("approvals.finance.book", "B")
    assert r.s.status == "completed"
    # a lane's output is that of its last step with one (as the run's): an approval has none
    assert r.s.output == {"legal": None, "finance": "B"}
    assert r.s.steps["approvals.legal.legal-ok"].output["outcome"] == "approved"


def test_an_approval_timeout_in_a_branch_fails_only_through_the_join() -> None:
    """The first request expires (on_timeout: reject, then fail): the branch fails, the other request
    is closed with the step."""
    r = LaneRun(load(APPROVALS), {})
    r.fire("approval:approvals.legal.legal-ok")
    assert r.s.status == "failed"
    assert not approvals(r.s)
    closed = [e.data.request_id for e in r.events if e.type == "ApprovalCancelled"]
    assert closed == ["r1/approvals.finance.finance-ok/r1"]


LINES = """
name: lines
steps:
  - id: lines
    for_each:
      items: "${input.lines}"
      concurrency: 2
      max_items: 5
      body:
        - id: pack
          activity: wh.pack
          timeout: 10s
          input: {sku: "${item.sku}", n: "${index}"}
          compensate: {activity: wh.unpack, input: {sku: "${item.sku}"}}
        - id: label
          activity: wh.label
          timeout: 10s
          input: {packed: "${steps.pack.output}"}
"""


def test_for_each_runs_the_body_per_item_at_most_concurrency_at_a_time() -> None:
    """Two items at a time; each item's steps see item and index and their own earlier steps; the
    output is the body outputs in item order."""
    r = LaneRun(load(LINES), {"lines": [{"sku": "a"}, {"sku": "b"}, {"sku": "c"}]})
    assert r.open_steps() == ["lines[0].pack", "lines[1].pack"]
    first = next(e.data for e in r.events if e.type == "ActivityScheduled")
    assert first.input == {"sku": "a", "n": 0}
    r.ok("lines[1].pack", "P1")
    assert r.open_steps() == ["lines[0].pack", "lines[1].label"]  # item 1 goes on; item 2 waits a slot
    r.ok("lines[1].label", "L1")
    assert r.open_steps() == ["lines[0].pack", "lines[2].pack"]
    r.ok("lines[0].pack", "P0")
    r.ok("lines[0].label", "L0")
    r.ok("lines[2].pack", "P2")
    label = [e.data for e in r.events if e.type == "ActivityScheduled" and e.data.step == "lines[2].label"]
    assert label[0].input == {"packed": "P2"}
    r.ok("lines[2].label", "L2")
    assert r.s.status == "completed"
    assert r.s.output == ["L0", "L1", "L2"]


def test_for_each_refuses_more_items_than_its_max_items_with_the_reason() -> None:
    """A list longer than max_items fails the step (TooManyItems), saying how many and the limit."""
    r = LaneRun(load(LINES), {"lines": [{"sku": str(i)} for i in range(6)]})
    assert r.s.status == "failed"
    assert r.s.error is not None
    assert r.s.error["code"] == "TooManyItems"
    assert "6 elements" in r.s.error["message"]
    assert "at most 5" in r.s.error["message"]


def test_for_each_of_no_items_completes_at_once_with_an_empty_list() -> None:
    """join all over nothing: done, output []."""
    r = LaneRun(load(LINES), {"lines": []})
    assert r.s.status == "completed"
    assert r.s.output == []


def test_for_each_compensates_items_side_by_side_within_its_concurrency() -> None:
    """After a later failure, every item's pack is undone, at most two at a time."""
    d = load(
        LINES.replace(
            "          input: {packed:", "          retry: {max_attempts: 1}\n          input: {packed:"
        )
    )
    r = LaneRun(d, {"lines": [{"sku": "a"}, {"sku": "b"}, {"sku": "c"}]})
    r.ok("lines[0].pack")
    r.ok("lines[1].pack")
    r.ok("lines[0].label")
    r.ok("lines[2].pack")
    r.bad("lines[1].label", "Jam")  # fails item 1, so the step; item 2's label is withdrawn
    assert r.s.status == "compensating"
    comps = sorted(a.step for a in attempts(r.s) if a.kind == "compensation")
    assert len(comps) == 2
    for key in comps:
        r.ok(key)
    left = sorted(a.step for a in attempts(r.s))
    assert len(left) == 1
    r.ok(left[0])
    assert r.s.status == "failed"
    undone = {e.data.step for e in r.events if e.type == "CompensationScheduled"}
    assert undone == {"lines[0].pack", "lines[1].pack", "lines[2].pack"}
    inputs = {e.data.step: e.data.input for e in r.events if e.type == "CompensationScheduled"}
    assert inputs["lines[2].pack"] == {"sku": "c"}  # rendered with the item it undoes


def test_pause_withdraws_every_queued_branch_attempt_and_resume_schedules_them_again() -> None:
    """A pause holds back all lanes' queued attempts; resume reschedules each, in its lane."""
    r = review()
    r.ok("prepare")
    r.claim_step("review.legal.check")
    r.send(PauseRun("maintenance", "ops"))
    assert r.open_steps() == ["review.legal.check"]  # the running one stays and will report
    r.ok("review.legal.check")  # its continuation is held back too
    assert r.open_steps() == []
    r.send(ResumeRun("done", "ops"))
    assert r.open_steps() == ["review.finance.budget", "review.legal.sign", "review.ops.staff"]


def test_skip_of_a_branch_step_is_checked_in_its_own_lane() -> None:
    """The current step of a branch is that branch's: a skip names it by its key."""
    d = load(
        REVIEW.replace("JOIN", "all").replace(
            "            activity: finance.budget",
            "            activity: finance.budget\n            skippable: true",
        )
    )
    r = LaneRun(d, {})
    r.ok("prepare")
    with pytest.raises(Rejected, match="not the current step"):
        r.send(SkipStep("review.legal.sign", "no", None, "ops", ("operator",)))
    r.send(SkipStep("review.finance.budget", "paid already", {"budget": 0}, "ops", ("operator",)))
    assert r.s.lanes["review.finance"].status == "succeeded"
    assert r.s.lanes["review.finance"].output == {"budget": 0}


def test_a_wait_in_a_branch_has_its_own_timer() -> None:
    """Timers are per branch step: a wait in one branch fires while the other runs."""
    d = load(
        """
name: waits
steps:
  - id: both
    parallel:
      branches:
        slow:
          - {id: cool, wait: 5s}
          - {id: after, activity: a.after, timeout: 5s}
        fast:
          - {id: now, activity: a.now, timeout: 5s}
"""
    )
    r = LaneRun(d, {})
    assert list(r.s.timers) == ["wait:both.slow.cool"]
    r.ok("both.fast.now", 1)
    r.fire("wait:both.slow.cool")
    r.ok("both.slow.after", 2)
    assert r.s.output == {"slow": 2, "fast": 1}
