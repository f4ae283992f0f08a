"""Approval commands: decisions, links, approver replacement and the approval timeout.

The service reads the approver's current roles and groups and passes them in; here we check them
against the recorded policy, the run's position (this request is still pending) and the one-decision-
per-approver rule, then settle the request when the quorum (or a rejection) is reached.
"""

from __future__ import annotations

from msgspec import UNSET

from .canonical import JSONObject
from .commands import DecideApproval, IssueApprovalLink, Rejected, ReplaceApprover, RevokeApprovalLink
from .definition import ApprovalStep
from .events import (
    ApprovalDecisionRecorded,
    ApprovalGranted,
    ApprovalLinkIssued,
    ApprovalLinkRevoked,
    ApprovalRejected,
    ApprovalTimedOut,
    ApproverReplaced,
)
from .flow import Tx, advance_after, cancel_timers, enter, fail, winding_down
from .form import check_values
from .lanes import approval_by_request, approval_of
from .paths import lane_of, qualify

__all__ = [
    "decide_approval",
    "eligible",
    "issue_link",
    "on_approval_timeout",
    "replace_approver",
]


def _pending(tx: Tx, request_id: str) -> JSONObject:
    """The pending request `request_id` (a run may wait for several, one per branch)."""
    a = approval_by_request(tx.s, request_id)
    if tx.s.terminal:
        raise Rejected(
            "not_waiting", f"the run is already {tx.s.status}; approval request {request_id} is closed"
        )
    if a is None:
        raise Rejected(
            "not_waiting",
            f"the run is no longer waiting for approval request {request_id} "
            f"(it was settled, timed out, cancelled or the run moved on)",
        )
    if tx.s.cancel is not None:
        raise Rejected("not_waiting", "the run is being cancelled; approvals are closed")
    if winding_down(tx.s, lane_of(a["step"])):  # pragma: no cover - a cancelled lane closes its requests
        raise Rejected("not_waiting", "this branch is being cancelled; its approval is closed")
    return a


def eligible(policy: JSONObject, approver: str, groups: tuple[str, ...]) -> bool:
    return approver in policy["users"] or any(g in policy["groups"] for g in groups)


def _check_identity(a: JSONObject, approver: str, groups: tuple[str, ...]) -> None:
    if not eligible(a["policy"], approver, groups):
        who = ", ".join([*a["policy"]["users"], *(f"group {g}" for g in a["policy"]["groups"])])
        raise Rejected("not_an_approver", f"{approver} is not an approver of this request (approvers: {who})")
    if not a["policy"]["allow_initiator"] and a.get("initiator") is not None and approver == a["initiator"]:
        raise Rejected(
            "initiator", f"{approver} started this run and the policy does not let the initiator decide"
        )


def decide_approval(tx: Tx, c: DecideApproval) -> None:
    a = _pending(tx, c.request_id)
    if c.decision not in ("approve", "reject"):
        raise Rejected("invalid_decision", f"decision must be approve or reject, not {c.decision!r}")
    earlier = [d for d in a["decisions"] if d["approver"] == c.approver]
    if earlier:
        raise Rejected(
            "already_decided",
            f"{c.approver} already decided {earlier[0]['decision']} at "
            f"{earlier[0]['at']}; one decision per approver",
        )
    _check_identity(a, c.approver, c.groups)
    values = _values(a, c)
    tx.emit(
        ApprovalDecisionRecorded(
            step=a["step"],
            request_id=c.request_id,
            approver=c.approver,
            decision=c.decision,
            comment=c.comment,
            roles=list(c.roles),
            groups=list(c.groups),
            link_id=c.link_id,
            values=UNSET if values is None else values,
        )
    )
    decisions = (approval_by_request(tx.s, c.request_id) or {}).get("decisions", [])
    approvals = [d["approver"] for d in decisions if d["decision"] == "approve"]
    rejections = [d["approver"] for d in decisions if d["decision"] == "reject"]
    policy = a["policy"]
    if len(rejections) >= policy["reject_quorum"]:
        _close_timer(tx, a["step"], "approval rejected")
        tx.emit(
            ApprovalRejected(
                step=a["step"],
                request_id=c.request_id,
                by=rejections,
                reason=f"rejected by {', '.join(rejections)}",
            )
        )
        _after_reject(tx, a["step"], policy, f"rejected by {', '.join(rejections)}")
    elif len(approvals) >= policy["quorum"]:
        _close_timer(tx, a["step"], "approval granted")
        tx.emit(ApprovalGranted(step=a["step"], request_id=c.request_id, approvers=approvals))
        advance_after(tx, a["step"])


def _values(a: JSONObject, c: DecideApproval) -> JSONObject | None:
    """The values to record with the decision: checked against the form the request was made with."""
    form = a["policy"].get("form")
    if not form:
        if c.values:
            raise Rejected("no_form", "this approval step has no form: decide without values")
        return None
    values, errors = check_values(form, c.values or {}, c.decision)
    if errors:
        listed = "; ".join(f"{k}: {v}" if k else v for k, v in errors.items())
        raise Rejected("invalid_values", f"the form's values were not accepted: {listed}")
    return values


def _close_timer(tx: Tx, step: str, reason: str) -> None:
    cancel_timers(tx, reason, step)


def _after_reject(tx: Tx, step: str, policy: JSONObject, why: str) -> None:
    target, lane = policy["on_reject"], lane_of(step)
    if target == "fail":
        error = {"code": "ApprovalRejected", "message": f"approval step {step} was {why}", "step": step}
        fail(tx, error, lane)
    else:
        enter(tx, None if target == "end" else qualify(lane, target), lane)


def on_approval_timeout(tx: Tx, step_id: str) -> None:
    """The approval timer fired (already recorded as TimerFired): apply `on_timeout`."""
    a = approval_of(tx.s, lane_of(step_id))
    if a is None:  # pragma: no cover - the timer would have been cancelled with the request
        raise Rejected("stale_timer", "no approval request is pending")
    step = tx.d.step(step_id)
    if not isinstance(step, ApprovalStep):  # pragma: no cover
        raise Rejected("corrupt", f"approval timer on non-approval step {step_id}")
    tx.emit(ApprovalTimedOut(step=step_id, request_id=a["request_id"], expires_at=a["expires_at"]))
    policy = a["policy"]
    if policy["on_timeout"] == "reject":
        _after_reject(tx, step_id, policy, "not decided before it expired (on_timeout: reject)")
    elif policy["on_timeout"] == "fail":
        fail(
            tx,
            {
                "code": "ApprovalTimedOut",
                "message": f"approval step {step_id} expired at {a['expires_at']}",
                "step": step_id,
            },
            lane_of(step_id),
        )
    else:
        target, lane = policy["on_timeout"], lane_of(step_id)
        enter(tx, None if target == "end" else qualify(lane, target), lane)


def issue_link(tx: Tx, c: IssueApprovalLink) -> None:
    a = _pending(tx, c.request_id)
    if any(d["approver"] == c.approver for d in a["decisions"]):
        raise Rejected(
            "already_decided", f"{c.approver} already decided on this request; no new link is needed"
        )
    _check_identity(a, c.approver, c.groups)
    most = tx.limits["max_links_per_approver"]
    if a.get("issued", {}).get(c.approver, 0) >= most:
        raise Rejected(
            "too_many_links",
            f"{most} links were already minted for {c.approver} on this request (the limit): revoke "
            f"one and use an open one, or let {c.approver} decide from the Approvals inbox (no link needed)",
        )
    tx.emit(
        ApprovalLinkIssued(
            step=a["step"],
            request_id=c.request_id,
            approver=c.approver,
            link_id=c.link_id,
            expires_at=min(c.expires_at, a["expires_at"]),
            by=c.by,
        )
    )


def replace_approver(tx: Tx, c: ReplaceApprover) -> None:
    """Separation of duties: the new approver must satisfy the request's policy on their own (approver
    role, in one of its groups), and may not be the acting operator, someone who already decided, or the
    initiator unless the policy allows it; otherwise an operator could hand a seat to themself."""
    a = _pending(tx, c.request_id)
    policy = a["policy"]
    if not c.reason.strip():
        raise Rejected("reason_required", "replacing an approver needs a reason")
    if c.old not in policy["users"]:
        raise Rejected(
            "not_an_approver",
            f"{c.old} is not a named approver of this request "
            f"(named: {', '.join(policy['users']) or 'none'})",
        )
    decided = {d["approver"]: d["decision"] for d in a["decisions"]}
    if c.old in decided:
        raise Rejected(
            "already_decided", f"{c.old} already decided; a recorded decision cannot be reassigned"
        )
    if c.actor is not None and c.new == c.actor:
        raise Rejected(
            "self_assignment", f"{c.actor} may not make themself an approver of a run they operate on"
        )
    if c.new in decided:
        raise Rejected(
            "already_decided",
            f"{c.new} already decided {decided[c.new]} on this request; one seat each",
        )
    if c.new in policy["users"]:
        raise Rejected("duplicate", f"{c.new} is already an approver of this request")
    if not policy["allow_initiator"] and a.get("initiator") == c.new:
        raise Rejected(
            "initiator", f"{c.new} started this run and the policy does not let the initiator decide"
        )
    if "approver" not in c.new_roles:
        raise Rejected("not_an_approver", f"{c.new} does not have the approver role, so could never decide")
    if not any(g in policy["groups"] for g in c.new_groups):
        groups = ", ".join(policy["groups"])
        raise Rejected(
            "outside_policy",
            f"{c.new} does not satisfy the policy of this request: a replacement must be in one of its "
            f"groups ({groups})"
            if groups
            else f"{c.new} does not satisfy the policy of this request: it names users only, so nobody "
            f"outside it can take a seat (cancel the run, or publish a version with a group)",
        )
    most = tx.limits["max_approver_replacements"]
    if a.get("replacements", 0) >= most:
        raise Rejected("too_many_replacements", f"this request already had {most} approver replacements")
    tx.emit(
        ApproverReplaced(
            step=a["step"], request_id=c.request_id, old=c.old, new=c.new, reason=c.reason, actor=c.actor
        )
    )


def revoke_link(tx: Tx, c: RevokeApprovalLink) -> None:
    a = _pending(tx, c.request_id)
    if not any(x["link_id"] == c.link_id for x in a["links"]):
        raise Rejected("unknown_link", f"link {c.link_id} is not an open link of request {c.request_id}")
    tx.emit(
        ApprovalLinkRevoked(
            step=a["step"],
            request_id=c.request_id,
            approver=c.approver,
            link_id=c.link_id,
            reason=c.reason,
            actor=c.actor,
        )
    )
