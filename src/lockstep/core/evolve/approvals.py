"""How the events of an approval step change the run's state: the pending request (`approval` of the
step's lane, a document copied on every change, never changed in place) and, once it settles, the step."""

from __future__ import annotations

import copy
from typing import Any, TypeAlias, assert_never

from msgspec import UNSET

from ..events import (
    ApprovalCancelled,
    ApprovalDecisionRecorded,
    ApprovalEvent,
    ApprovalGranted,
    ApprovalLinkIssued,
    ApprovalLinkRevoked,
    ApprovalRejected,
    ApprovalRequested,
    ApprovalTimedOut,
    ApproverReplaced,
    Event,
)
from ..form import merged
from ..lanes import approval_of
from ..paths import lane_of
from ..state import RunState, StepState
from .copying import steps_with, with_lane

__all__ = ["evolve_approval"]

Settled: TypeAlias = ApprovalGranted | ApprovalRejected | ApprovalTimedOut | ApprovalCancelled
# The events about a request that is already pending.
OnPending: TypeAlias = (
    ApprovalLinkIssued | ApprovalLinkRevoked | ApprovalDecisionRecorded | ApproverReplaced | Settled
)


def evolve_approval(s: RunState, d: ApprovalEvent, e: Event) -> RunState:
    match d:
        case ApprovalRequested():
            return _approval_requested(s, d, e)
        case ApprovalLinkIssued():
            return _link_issued(s, d, e)
        case ApprovalLinkRevoked():
            return _link_revoked(s, d, e)
        case ApprovalDecisionRecorded():
            return _decision(s, d, e)
        case ApproverReplaced():
            return _approver_replaced(s, d, e)
        case ApprovalGranted() | ApprovalRejected() | ApprovalTimedOut() | ApprovalCancelled():
            return _approval_settled(s, d, e)
        case _:
            assert_never(d)


def _approval_requested(s: RunState, d: ApprovalRequested, e: Event) -> RunState:
    prev = s.steps.get(d.step, StepState())
    a: dict[str, Any] = {
        "request_id": d.request_id,
        "step": d.step,
        "policy": d.policy,
        "policy_digest": d.policy_digest,
        "details": d.details,
        "requested_at": e.at,
        "expires_at": d.expires_at,
        "initiator": d.initiator,
        "decisions": [],
        "links": [],
    }
    if d.warnings:  # absent from requests that had nothing to say (and from every older history)
        a["warnings"] = list(d.warnings)
    steps = steps_with(
        s,
        d.step,
        status="waiting_approval",
        attempts=prev.attempts + 1,
        started_at=e.at,
        finished_at=None,
        error=None,
    )
    return with_lane(s, lane_of(d.step), {"steps": steps}, approval=a, current_step=d.step)


def _pending(s: RunState, d: OnPending, e: Event) -> dict[str, Any]:
    """A copy of the pending request the event is about (the state's own is never changed in place)."""
    a = approval_of(s, lane_of(d.step))
    if a is None or a["request_id"] != d.request_id:
        raise ValueError(f"{d.type} at seq {e.seq} for request {d.request_id} that is not pending")
    return copy.deepcopy(a)


def _link_issued(s: RunState, d: ApprovalLinkIssued, e: Event) -> RunState:
    a = _pending(s, d, e)
    a["links"].append({"approver": d.approver, "link_id": d.link_id, "expires_at": d.expires_at, "at": e.at})
    issued = a.get("issued", {})
    a["issued"] = {**issued, d.approver: issued.get(d.approver, 0) + 1}
    return with_lane(s, lane_of(d.step), approval=a)


def _link_revoked(s: RunState, d: ApprovalLinkRevoked, e: Event) -> RunState:
    a = _pending(s, d, e)
    a["links"] = [x for x in a["links"] if x["link_id"] != d.link_id]
    return with_lane(s, lane_of(d.step), approval=a)


def _decision(s: RunState, d: ApprovalDecisionRecorded, e: Event) -> RunState:
    a = _pending(s, d, e)
    decision: dict[str, Any] = {
        "approver": d.approver,
        "decision": d.decision,
        "comment": d.comment,
        "at": e.at,
        "roles": d.roles,
        "groups": d.groups,
        "link_id": d.link_id,
    }
    if d.values is not UNSET:  # a request with a form (older decisions fold as they always did)
        decision["values"] = d.values
    a["decisions"].append(decision)
    return with_lane(s, lane_of(d.step), approval=a)


def _approver_replaced(s: RunState, d: ApproverReplaced, e: Event) -> RunState:
    a = _pending(s, d, e)
    users = [d.new if u == d.old else u for u in a["policy"]["users"]]
    if d.new not in users:
        users.append(d.new)
    a["policy"] = {**a["policy"], "users": list(dict.fromkeys(users))}
    a["links"] = [x for x in a["links"] if x["approver"] != d.old]
    a["replacements"] = a.get("replacements", 0) + 1
    a.pop("warnings", None)  # they were about the approvers as requested; an operator changed them
    return with_lane(s, lane_of(d.step), approval=a)


SETTLED_STATUS: dict[type[Settled], str] = {
    ApprovalGranted: "succeeded",
    ApprovalRejected: "rejected",
    ApprovalTimedOut: "timed_out",
    ApprovalCancelled: "cancelled",
}


def _approval_settled(s: RunState, d: Settled, e: Event) -> RunState:
    a = _pending(s, d, e)
    status = SETTLED_STATUS[type(d)]
    outcome = "approved" if isinstance(d, ApprovalGranted) else status
    output = {"request_id": a["request_id"], "outcome": outcome, "decisions": a["decisions"]}
    if a["policy"].get("form"):  # the merged values for later steps; absent for a step without a form
        output["values"] = merged(a["decisions"])
    steps = steps_with(s, a["step"], status=status, output=output, finished_at=e.at)
    return with_lane(s, lane_of(d.step), {"steps": steps}, approval=None)
