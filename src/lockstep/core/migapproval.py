"""Migrations that need approval, the rules (pure): which policy governs a migration, one approver's
decision on a migration request, and whether a request's decisions grant it.

A migration of a run from version A to version B needs approval when B says so (`migration:
requires_approval`, the natural reading: "moving a run onto this version needs approval") or, when B
says nothing, when A says so (so publishing a version without the block is no way around A's). The
request records that policy; decisions are checked against it like an approval step's: the approver is
named or in a named group (their groups as read when they decide), one decision each, and the operator
who asked may never decide: there is no allow_initiator. `check_granted` is what `migrate` (core) asks
of the decisions a MigrateRun carries, so no path applies a migration its approvers did not grant.
"""

from __future__ import annotations

from .canonical import JSONObject
from .commands import Rejected
from .definition import Definition

__all__ = ["STATUSES", "check_granted", "decide_request", "migration_policy", "tally"]

# pending: waiting for decisions; approved: granted, its runs being migrated (a pass finishes it);
# applied: every run of it migrated or reported; rejected; expired.
STATUSES = ("pending", "approved", "applied", "rejected", "expired")


def migration_policy(
    current: Definition, current_version: int, target: Definition, target_version: int
) -> JSONObject | None:
    """The policy a migration from `current` to `target` needs (None: none): the target's, else the
    current version's."""
    if target.migration_approval is not None:
        return target.migration_approval.policy(target_version)
    if current.migration_approval is not None:
        return current.migration_approval.policy(current_version)
    return None


def _eligible(policy: JSONObject, approver: str, groups: list[str] | tuple[str, ...]) -> bool:
    return approver in policy["users"] or any(g in policy["groups"] for g in groups)


def tally(policy: JSONObject, decisions: list[JSONObject]) -> str:
    """pending, approved or rejected: what `decisions` make of a request under `policy`."""
    approvals = {d["approver"] for d in decisions if d["decision"] == "approve"}
    rejections = {d["approver"] for d in decisions if d["decision"] == "reject"}
    if len(rejections) >= policy["reject_quorum"]:
        return "rejected"
    if len(approvals) >= policy["quorum"]:
        return "approved"
    return "pending"


def decide_request(
    request: JSONObject,
    approver: str,
    roles: tuple[str, ...],
    groups: tuple[str, ...],
    decision: str,
    comment: str | None,
    now_ms: int,
    at: str,
) -> tuple[JSONObject, str]:
    """One decision on the migration request `request` ({policy, requested_by, decisions, status,
    expires_at_ms}): the decision record and the request's status after it, or Rejected."""
    if decision not in ("approve", "reject"):
        raise Rejected("invalid_decision", f"decision must be approve or reject, not {decision!r}")
    rid = request["request_id"]
    if request["status"] == "expired" or (
        request["status"] == "pending" and request["expires_at_ms"] <= now_ms
    ):
        raise Rejected("expired", f"migration request {rid} expired before it was decided")
    if request["status"] != "pending":
        raise Rejected("not_waiting", f"migration request {rid} is closed: it was {request['status']}")
    if approver == request["requested_by"]:
        raise Rejected(
            "requester",
            f"{approver} asked for this migration and may not decide on it: another approver must",
        )
    earlier = [d for d in request["decisions"] if d["approver"] == approver]
    if earlier:
        raise Rejected(
            "already_decided",
            f"{approver} already decided {earlier[0]['decision']} at {earlier[0]['at']}; one decision "
            f"per approver",
        )
    policy = request["policy"]
    if not _eligible(policy, approver, groups):
        who = ", ".join([*policy["users"], *(f"group {g}" for g in policy["groups"])])
        raise Rejected(
            "not_an_approver", f"{approver} is not an approver of this migration (approvers: {who})"
        )
    record: JSONObject = {
        "approver": approver,
        "decision": decision,
        "comment": comment,
        "at": at,
        "roles": list(roles),
        "groups": list(groups),
    }
    return record, tally(policy, [*request["decisions"], record])


def check_granted(
    policy: JSONObject, request_id: str, decisions: list[JSONObject], requester: str | None
) -> None:
    """Refuse a migration under `policy` unless `decisions` grant it: a quorum of distinct eligible
    approvers, none of them the operator who asked, and fewer rejections than reject it."""
    if requester is None or not requester.strip():
        raise Rejected("operator_required", "a migration that needs approval names the operator who asked")
    if any(d["approver"] == requester for d in decisions):
        raise Rejected("requester", f"{requester} asked for this migration and may not approve it")
    counted = [d for d in decisions if _eligible(policy, d["approver"], d.get("groups", []))]
    if tally(policy, counted) != "approved":
        raise Rejected(
            "approval_required",
            f"migration request {request_id} is not granted: {policy['quorum']} approval(s) of "
            f"{', '.join([*policy['users'], *(f'group {g}' for g in policy['groups'])])} are needed",
        )
