"""The span of an operator's command (a repair, a four-eyes proposal and its decision, a cancel, an
approver replaced or a link revoked): its name and what it carries, the command's kind, actor, reason
and step. Never the values a repair carries (an output given to skip or resolve a step, an edited
input, the transitions it superseded): they may be sensitive."""

from __future__ import annotations

from ...core.events import (
    ApprovalLinkRevoked,
    ApproverReplaced,
    CancelRequested,
    EventData,
    InputEdited,
    RepairConfirmed,
    RepairProposed,
    RepairRejected,
    RunPaused,
    RunResumed,
    StepResolved,
    StepRetried,
    StepSkipped,
    WorkflowMigrated,
)

__all__ = ["OPERATOR_SPANS", "operator_span"]

Attr = str | int | bool

# Event type -> the span's name.
OPERATOR_SPANS = {
    "StepRetried": "operator retry",
    "RunPaused": "operator pause",
    "RunResumed": "operator resume",
    "StepSkipped": "operator skip",
    "InputEdited": "operator edit-input",
    "StepResolved": "operator resolve",
    "WorkflowMigrated": "operator migrate",
    "RepairProposed": "operator propose",
    "RepairConfirmed": "operator confirm",
    "RepairRejected": "operator reject",
    "CancelRequested": "operator cancel",
    "ApproverReplaced": "operator reassign",
    "ApprovalLinkRevoked": "operator revoke-link",
}


def operator_span(d: EventData, limit: int) -> tuple[str, dict[str, Attr]] | None:
    """(name, attributes) of the operator span `d` stands for, or None if it is not an operator's."""
    name = OPERATOR_SPANS.get(d.type)
    if name is None:
        return None
    attrs: dict[str, Attr] = {"lockstep.command": d.type}
    match d:
        case StepRetried() | StepSkipped() | StepResolved() | InputEdited() | RunPaused() | RunResumed():
            _who(attrs, d.actor, d.reason, limit)
        case CancelRequested() | WorkflowMigrated() | ApproverReplaced() | ApprovalLinkRevoked():
            _who(attrs, d.actor, d.reason, limit)
        case RepairProposed():
            _who(attrs, d.actor, d.reason, limit)
            attrs["lockstep.proposal_id"] = d.proposal_id
            attrs["lockstep.repair"] = d.kind
        case RepairConfirmed() | RepairRejected():
            _who(attrs, d.by, d.reason, limit)
            attrs["lockstep.proposal_id"] = d.proposal_id
            attrs["lockstep.repair"] = d.kind
            attrs["lockstep.proposed_by"] = d.proposed_by
    step = getattr(d, "step", None)
    if isinstance(step, str):
        attrs["lockstep.step"] = step
    if isinstance(d, StepResolved):
        attrs["lockstep.outcome"] = d.outcome
    if isinstance(d, WorkflowMigrated):
        attrs["lockstep.to_version"] = int(d.definition.get("version") or 0)
    if isinstance(d, ApproverReplaced):
        attrs["lockstep.approver"] = d.new
    return name, attrs


def _who(attrs: dict[str, Attr], actor: str | None, reason: str | None, limit: int) -> None:
    if actor:
        attrs["lockstep.actor"] = actor
    if reason:
        attrs["lockstep.reason"] = reason[:limit]
