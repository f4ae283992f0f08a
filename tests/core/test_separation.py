"""Separation of duties around approvals, in the pure core (decide): what an operator can and cannot do
to a run waiting for approval, four-eyes repairs, and the bounds on events people and workers repeat.

Each `test_attack_*` is an attack from issue 14 that the core used to accept."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from corekit import Run, types

from lockstep.core.commands import (
    CancelRun,
    ConfirmRepair,
    DecideApproval,
    EditInput,
    FireTimer,
    IssueApprovalLink,
    MigrateRun,
    PauseRun,
    Rejected,
    RejectRepair,
    ReplaceApprover,
    ReportSuccess,
    ResolveStep,
    ResumeRun,
    RetryStep,
    RevokeApprovalLink,
    SkipStep,
)
from lockstep.core.definition import Definition, DefinitionError, parse_definition
from lockstep.core.explain import explain
from lockstep.core.limits import DEFAULT_SERVER_LIMITS

PO = """
name: po
input_schema: {type: object, required: [po, amount]}
steps:
  - id: manager-approval
    approval:
      approvers: {users: [alice, bob], groups: [finance]}
      quorum: 2
      timeout: 3d
      on_timeout: reject
      on_reject: fail
      details: "Approve PO ${input.po} for ${input.amount} EUR"
  - id: pay-supplier
    activity: payments.charge
    input: {po: "${input.po}", amount: "${input.amount}"}
    timeout: 30s
"""
RID = "r1/manager-approval/r1"
APPROVER = ("approver",)


def po(**changes: Any) -> Definition:
    doc = yaml.safe_load(PO)
    doc.update(changes)
    return parse_definition(doc)


def policy_of(d: Definition, **changes: Any) -> Definition:
    doc = dict(d.document)
    steps = [dict(s) for s in doc["steps"]]
    steps[0] = {**steps[0], "approval": {**steps[0]["approval"], **changes}}
    return parse_definition({**doc, "steps": steps})


def waiting(d: Definition | None = None, initiator: str | None = "ivan") -> Run:
    r = Run(d or po(), {"po": "PO-1", "amount": 10}, actor=initiator)
    assert r.s.approval is not None
    return r


def approve(r: Run, who: str, groups: tuple[str, ...] = ()) -> None:
    r.send(DecideApproval(RID, who, "approve", None, APPROVER, groups))


def refused(r: Run, command: Any, code: str, needle: str = "") -> Rejected:
    seq = r.s.seq
    with pytest.raises(Rejected) as exc:
        r.send(command)
    assert exc.value.code == code, exc.value.reason
    assert needle in exc.value.reason
    assert r.s.seq == seq
    return exc.value


# --- 1. a pending approval ends only by its policy or a cancel ------------------------------------


def test_attack_migrate_maps_the_pending_approval_onto_the_payment_and_is_refused() -> None:
    """--map manager-approval=pay-supplier on a run waiting for approval is refused; nothing is paid."""
    r = waiting()
    v2 = po()
    cmd = MigrateRun(v2, 2, (("manager-approval", "pay-supplier"),), "move on", "op")
    err = refused(r, cmd, "incompatible", "approval request r1/manager-approval/r1")
    assert "would move it onto another step" in err.reason
    assert r.s.active is None
    assert r.s.approval is not None


def test_migrate_to_a_version_without_the_approval_step_is_refused() -> None:
    """A target that drops the approval step (or turns it into an activity) cannot carry the request."""
    r = waiting()
    dropped = parse_definition(
        {**po().document, "steps": [s for s in po().document["steps"] if "approval" not in s]}
    )
    refused(r, MigrateRun(dropped, 2, (), "simplify", "op"), "incompatible", "no approval step")
    as_activity = yaml.safe_load(PO)
    as_activity["steps"][0] = {"id": "manager-approval", "activity": "auto.approve", "timeout": "1s"}
    refused(
        r, MigrateRun(parse_definition(as_activity), 2, (), "x", "op"), "incompatible", "no approval step"
    )
    other = yaml.safe_load(PO)
    other["steps"].insert(0, {"id": "pre", "wait": "1s"})
    refused(
        r, MigrateRun(parse_definition(other), 2, (("pre", "manager-approval"),), "x", "op"), "incompatible"
    )


def test_migrate_keeps_the_request_its_decisions_and_its_recorded_policy() -> None:
    """Migrating to a version with the same approval step (even one with quorum 1) carries the request;
    its recorded policy keeps governing: alice's approval stays, and it still takes a second one."""
    r = waiting()
    approve(r, "alice")
    weaker = policy_of(po(), quorum=1)
    r.send(MigrateRun(weaker, 2, (), "fix a typo", "op"))
    assert r.s.approval is not None
    assert r.s.approval["request_id"] == RID
    assert [d["approver"] for d in r.s.approval["decisions"]] == ["alice"]
    assert r.s.approval["policy"]["quorum"] == 2
    r.d = weaker
    approve(r, "bob")
    assert r.s.active is not None
    assert r.s.active.step == "pay-supplier"


def test_migrate_refused_when_the_recorded_on_reject_target_is_gone() -> None:
    """The carried request's on_reject step must exist in the target, or a rejection would go nowhere."""
    doc = yaml.safe_load(PO)
    doc["steps"][0]["approval"]["on_reject"] = "rework"
    doc["steps"].append({"id": "rework", "wait": "1h", "next": "end"})
    r = waiting(parse_definition(doc))
    target = yaml.safe_load(PO)
    refused(r, MigrateRun(parse_definition(target), 2, (), "x", "op"), "incompatible", "on_reject")


def test_attack_skip_of_a_pending_approval_is_refused_even_when_skippable() -> None:
    """A skippable approval step is still not skipped while its request is pending."""
    doc = yaml.safe_load(PO)
    doc["steps"][0]["skippable"] = True
    r = waiting(parse_definition(doc))
    refused(r, SkipStep("manager-approval", "urgent", None, "op", ("operator",)), "approval_pending")


def test_pause_resume_and_other_repairs_do_not_end_a_pending_approval() -> None:
    """Pause/resume keep the request (decisions still count); resolve/retry have nothing to settle; only
    a cancel closes it."""
    r = waiting()
    r.send(PauseRun("look", "op"))
    approve(r, "alice")
    r.send(ResumeRun("ok", "op"))
    assert r.s.approval is not None
    assert r.s.approval["request_id"] == RID
    assert [d["approver"] for d in r.s.approval["decisions"]] == ["alice"]
    refused(r, ResolveStep("manager-approval", "succeeded", "done", None, "op"), "not_resolvable")
    refused(r, RetryStep("manager-approval", "again", "op"), "not_retryable")
    r.send(CancelRun("withdrawn", "op"))
    assert "ApprovalCancelled" in types(r.events)
    assert r.s.status == "cancelled"


def test_the_approval_timeout_still_applies_its_policy() -> None:
    """The durable timeout ends the request by on_timeout (reject -> fail), not by running the payment."""
    r = waiting()
    (t,) = r.s.timers.values()
    r.advance(3 * 86400)
    r.send(FireTimer(t.key, t.generation))
    assert r.s.status == "failed"
    assert "ActivityScheduled" not in types(r.events)


# --- 2. reassign only to someone the policy admits -------------------------------------------------


def test_attack_reassign_to_the_acting_operator_is_refused() -> None:
    """An operator (even one with the approver role, in finance) cannot give themself alice's seat."""
    r = waiting()
    cmd = ReplaceApprover(RID, "alice", "olga", "alice away", "olga", APPROVER, ("finance",))
    refused(r, cmd, "self_assignment")


def test_attack_reassign_to_an_approver_outside_the_policy_is_refused() -> None:
    """erin has the approver role but is in none of the policy's groups: she may not take a seat."""
    r = waiting()
    refused(r, ReplaceApprover(RID, "alice", "erin", "x", "op", APPROVER, ()), "outside_policy", "finance")
    users_only = policy_of(po(), approvers={"users": ["alice", "bob"]})
    r2 = waiting(users_only)
    refused(
        r2, ReplaceApprover(RID, "alice", "erin", "x", "op", APPROVER, ()), "outside_policy", "users only"
    )


def test_reassign_refuses_deciders_the_initiator_and_non_approvers() -> None:
    """Never to someone who already decided, nor to the initiator (allow_initiator false), nor to a user
    without the approver role."""
    r = waiting(initiator="dave")
    approve(r, "carol", ("finance",))
    refused(r, ReplaceApprover(RID, "alice", "carol", "x", "op", APPROVER, ("finance",)), "already_decided")
    refused(r, ReplaceApprover(RID, "alice", "dave", "x", "op", APPROVER, ("finance",)), "initiator")
    refused(
        r, ReplaceApprover(RID, "alice", "frank", "x", "op", ("viewer",), ("finance",)), "not_an_approver"
    )
    r.send(ReplaceApprover(RID, "alice", "gina", "alice left", "op", APPROVER, ("finance",)))
    assert r.s.approval is not None
    assert r.s.approval["policy"]["users"] == ["gina", "bob"]


def test_reassign_to_the_initiator_when_the_policy_allows_it() -> None:
    """With allow_initiator: true the initiator (in finance) may take the seat."""
    r = waiting(policy_of(po(), allow_initiator=True), initiator="dave")
    r.send(ReplaceApprover(RID, "alice", "dave", "x", "op", APPROVER, ("finance",)))


def test_replacements_per_request_are_bounded() -> None:
    """Swapping approvers back and forth stops at max_approver_replacements."""
    r = waiting()
    pair = ("alice", "gina")
    for _ in range(DEFAULT_SERVER_LIMITS["max_approver_replacements"]):
        r.send(ReplaceApprover(RID, pair[0], pair[1], "swap", "op", APPROVER, ("finance",)))
        pair = (pair[1], pair[0])
    refused(
        r,
        ReplaceApprover(RID, pair[0], pair[1], "swap", "op", APPROVER, ("finance",)),
        "too_many_replacements",
    )


# --- 3. edit-input under an approval ----------------------------------------------------------------


def test_attack_edit_input_while_the_approval_is_pending_is_refused() -> None:
    """Approvers see "10 EUR": the input cannot become 999,999 under them."""
    r = waiting()
    approve(r, "alice")
    refused(r, EditInput({"po": "PO-1", "amount": 999_999}, "typo", "op"), "approval_pending")
    assert r.s.approval is not None
    assert r.s.approval["details"] == "Approve PO PO-1 for 10 EUR"


def test_attack_edit_input_after_the_approval_was_granted_is_refused() -> None:
    """Once granted, the rest of the run uses the input that was approved (here: paused before pay)."""
    r = waiting()
    r.send(PauseRun("hold the payment", "op"))
    approve(r, "alice")
    approve(r, "bob")
    refused(r, EditInput({"po": "PO-1", "amount": 999_999}, "typo", "op"), "approved_input", RID)


def test_edit_input_before_any_approval_is_allowed() -> None:
    """Before the run reaches its approval, an edit is allowed and the request renders the new input."""
    doc = yaml.safe_load(PO)
    doc["steps"].insert(0, {"id": "hold", "wait": "1h"})
    r = Run(parse_definition(doc), {"po": "PO-1", "amount": 10})
    r.send(EditInput({"po": "PO-1", "amount": 12}, "typo", "op"))
    (t,) = r.s.timers.values()
    r.advance(3600)
    r.send(FireTimer(t.key, t.generation))
    assert r.s.approval is not None
    assert r.s.approval["details"] == "Approve PO PO-1 for 12 EUR"


# --- 4. four-eyes -----------------------------------------------------------------------------------

GUARDED = """
name: guarded
four_eyes: [skip, migrate, resolve]
steps:
  - id: pay
    activity: bank.transfer
    delivery: at_most_once
    timeout: 30s
    retry: {max_attempts: 1}
  - id: hold
    wait: 1d
    skippable: true
  - id: ship
    activity: shipping.create
    timeout: 10s
"""


def guarded_at_hold() -> Run:
    r = Run(parse_definition(yaml.safe_load(GUARDED)))
    r.claim()
    r.succeed({"ok": True})
    assert r.s.current_step == "hold"
    return r


def test_four_eyes_is_validated_at_publish() -> None:
    """An unknown repair, a non-list or a duplicate in four_eyes is refused with the key and the fix."""
    for bad, needle in (
        ([" skip"], "unknown repair"),
        ("skip", "must be a list"),
        (["skip", "skip"], "twice"),
    ):
        doc = {**yaml.safe_load(GUARDED), "four_eyes": bad}
        with pytest.raises(DefinitionError) as exc:
            parse_definition(doc)
        assert "four_eyes" in str(exc.value)
        assert needle in str(exc.value)
    with pytest.raises(DefinitionError, match="did you mean `resolve`"):
        parse_definition({**yaml.safe_load(GUARDED), "four_eyes": ["resolv"]})


def test_four_eyes_skip_is_a_proposal_until_a_second_operator_confirms() -> None:
    """The first operator's skip records RepairProposed only; the proposer cannot confirm it; a second
    operator's confirmation runs it (and explain says a proposal awaits a second operator meanwhile)."""
    r = guarded_at_hold()
    events = r.send(SkipStep("hold", "customer called", None, "ana", ("operator",)))
    assert types(events) == ["RepairProposed"]
    p = events[0].data
    assert (p.kind, p.actor, p.reason) == ("skip", "ana", "customer called")
    assert p.command == {"step": "hold", "output": None, "roles": ["operator"]}
    assert p.effect == ["TimerCancelled", "StepSkipped", "ActivityScheduled"]
    assert r.s.steps["hold"].status == "waiting"
    why = explain(r.s, r.now)
    assert f"proposal {p.proposal_id} (skip of step hold by ana" in why["wait_reason"]
    assert "awaits a second operator" in why["wait_reason"]
    assert f"lockstep confirm RUN {p.proposal_id}" in why["next_action"]
    refused(r, ConfirmRepair(p.proposal_id, "me too", "ana", ("operator",)), "same_operator")
    refused(r, ConfirmRepair(p.proposal_id, "ok", None, ("operator",)), "operator_required")
    done = r.send(ConfirmRepair(p.proposal_id, "checked the call", "ben", ("operator",)))
    assert types(done)[:3] == ["RepairConfirmed", "TimerCancelled", "StepSkipped"]
    assert done[0].data.by == "ben"
    assert done[0].data.proposed_by == "ana"
    assert done[2].data.actor == "ana"
    assert r.s.proposal is None
    assert r.s.steps["hold"].status == "skipped"


def test_a_proposal_goes_stale_when_the_run_moves_on() -> None:
    """A proposal made for one state cannot be confirmed after the run moved on (the timer fired)."""
    r = guarded_at_hold()
    pid = r.send(SkipStep("hold", "customer called", None, "ana", ("operator",)))[0].data.proposal_id
    (t,) = r.s.timers.values()
    r.advance(86400)
    r.send(FireTimer(t.key, t.generation))
    assert r.s.proposal is None
    refused(r, ConfirmRepair(pid, "ok", "ben", ("operator",)), "no_proposal", "moved on")


def test_a_proposal_is_rejected_by_anyone_or_withdrawn_by_its_proposer() -> None:
    """Rejection by another operator, withdrawal by the proposer; one open proposal at a time; bounded."""
    r = guarded_at_hold()
    skip = SkipStep("hold", "why not", None, "ana", ("operator",))
    pid = r.send(skip)[0].data.proposal_id
    refused(r, SkipStep("hold", "again", None, "carl", ("operator",)), "proposal_open", pid)
    rejected = r.send(RejectRepair(pid, "no", "ben"))
    assert rejected[0].data.withdrawn is False
    pid = r.send(skip)[0].data.proposal_id
    assert r.send(RejectRepair(pid, "changed my mind", "ana"))[0].data.withdrawn is True
    refused(r, ConfirmRepair(pid, "ok", "ben", ("operator",)), "no_proposal")
    while r.s.proposals_made < DEFAULT_SERVER_LIMITS["max_repair_proposals"]:
        r.send(RejectRepair(r.send(skip)[0].data.proposal_id, "no", "ben"))
    refused(r, skip, "too_many_proposals")


def test_a_proposal_is_checked_when_made_and_again_when_confirmed() -> None:
    """A command the state machine would refuse is refused as a proposal; the confirmer's roles count."""
    r = guarded_at_hold()
    refused(r, SkipStep("ship", "x", None, "ana", ("operator",)), "not_current")
    refused(r, SkipStep("hold", "x", None, None, ("operator",)), "operator_required")
    doc = yaml.safe_load(GUARDED)
    doc["steps"][1] = {"id": "hold", "wait": "1d", "skip_policy": {"roles": ["operator"]}}
    r2 = Run(parse_definition(doc))
    r2.claim()
    r2.succeed(None)
    pid = r2.send(SkipStep("hold", "x", None, "ana", ("operator",)))[0].data.proposal_id
    refused(r2, ConfirmRepair(pid, "ok", "ben", ("viewer",)), "forbidden")


def test_four_eyes_resolve_and_migrate() -> None:
    """resolve of an unknown outcome and a migration wait for a second operator too; a migrate proposal
    is confirmed only with the version it names."""
    r = Run(parse_definition(yaml.safe_load(GUARDED)))
    r.claim()
    r.expire()
    assert r.s.attention is not None
    pid = r.send(ResolveStep("pay", "succeeded", "bank says paid", {"ok": 1}, "ana"))[0].data.proposal_id
    r.send(ConfirmRepair(pid, "checked the statement", "ben"))
    assert r.s.steps["pay"].status == "succeeded"
    v2doc = yaml.safe_load(GUARDED)
    v2doc["steps"][1]["wait"] = "2d"
    v2 = parse_definition(v2doc)
    events = r.send(MigrateRun(v2, 2, (), "longer hold", "ana"))
    assert types(events) == ["RepairProposed"]
    assert events[0].data.command == {"to_version": 2, "target_digest": v2.digest, "mapping": []}
    pid = events[0].data.proposal_id
    refused(r, ConfirmRepair(pid, "ok", "ben", target=r.d), "wrong_target")
    done = r.send(ConfirmRepair(pid, "ok", "ben", target=v2))
    assert "WorkflowMigrated" in types(done)
    assert r.s.definition["version"] == 2


def test_without_four_eyes_repairs_run_at_once() -> None:
    """A definition without four_eyes keeps one-operator repairs (and has no proposals to confirm)."""
    doc = yaml.safe_load(GUARDED)
    del doc["four_eyes"]
    r = Run(parse_definition(doc))
    r.claim()
    r.succeed(None)
    assert "StepSkipped" in types(r.send(SkipStep("hold", "x", None, "ana", ("operator",))))
    refused(r, ConfirmRepair("p1", "ok", "ben"), "no_proposal")


# --- 5. history limits ------------------------------------------------------------------------------


def _code(r: Run, command: Any) -> str | None:
    """Send; the refusal code, or None if accepted."""
    try:
        r.send(command)
    except Rejected as exc:
        return exc.code
    return None


def test_attack_a_worker_replaying_a_stale_report_10000_times_leaves_the_history_bounded() -> None:
    """The first few replays are evidence (ResultIgnored), the rest are refused as result_ignored with
    nothing appended: the run stays alive under any max_history_events."""
    r = guarded_at_hold()
    first = r.events[2]  # ActivityStarted of pay
    stale = ReportSuccess(first.data.task_id, first.data.attempt, first.data.fencing, {"x": 1})
    seq = r.s.seq
    codes = {_code(r, stale) for _ in range(10_000)}
    assert codes == {None, "result_ignored"}
    assert r.s.seq == seq + DEFAULT_SERVER_LIMITS["max_ignored_results_per_attempt"]
    assert r.s.status == "waiting"
    # Made-up task ids of the same run: bounded per run too.
    codes = {_code(r, ReportSuccess(f"r1/pay/a1-{i}", 1, 1, None)) for i in range(10_000)}
    assert codes == {None, "result_ignored"}
    assert r.s.ignored_results == DEFAULT_SERVER_LIMITS["max_ignored_results_per_run"]
    assert r.s.status == "waiting"


def test_attack_links_minted_per_approver_are_bounded() -> None:
    """Minting links for one approver over and over stops at max_links_per_approver (revoking does not
    reset it): the inbox needs no link, and a resend is needed only a few times."""
    r = waiting()
    most = DEFAULT_SERVER_LIMITS["max_links_per_approver"]
    for i in range(most):
        r.send(IssueApprovalLink(RID, "alice", f"l{i}", "2099-01-01T00:00:00Z", APPROVER, ()))
        r.send(RevokeApprovalLink(RID, "alice", f"l{i}", "resend", "op"))
    cmd = IssueApprovalLink(RID, "alice", "lx", "2099-01-01T00:00:00Z", APPROVER, ())
    refused(r, cmd, "too_many_links", "inbox")
    r.send(IssueApprovalLink(RID, "bob", "lb", "2099-01-01T00:00:00Z", APPROVER, ()))  # per approver


def test_retry_after_a_migration_renamed_the_step_keeps_its_idempotency_key() -> None:
    """A dead-lettered step renamed by a migration (ship -> dispatch) is retried with the key it was
    attempted with, not one naming the new step id (the downstream would see a new request)."""
    doc = {
        "name": "ren",
        "steps": [
            {
                "id": "ship",
                "activity": "shipping.create",
                "timeout": "10s",
                "retry": {"max_attempts": 1, "on_exhausted": "dead_letter"},
            }
        ],
    }
    r = Run(parse_definition(doc))
    key = r.s.steps["ship"].idempotency_key
    r.claim()
    r.fail("Busy", "try later")
    assert r.s.attention is not None
    renamed = parse_definition({**doc, "steps": [{**doc["steps"][0], "id": "dispatch"}]})
    r.send(MigrateRun(renamed, 2, (("ship", "dispatch"),), "rename", "op"))
    r.d = renamed
    events = r.send(RetryStep("dispatch", "worker is back", "op"))
    (scheduled,) = [e for e in events if e.type == "ActivityScheduled"]
    assert scheduled.data.idempotency_key == key
