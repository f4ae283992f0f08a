"""/v1 approvals: decide with the approver's own key, inboxes, and operator link management."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from ..app.approvals import Approvals
from ..app.principals import Principal
from ..app.views import (
    DecisionResult,
    InboxItem,
    LinkView,
    MigrationRequestView,
    MintedLink,
    Reassigned,
    RevokedLink,
)
from ..core.timeutil import parse_duration
from ..errors import InvalidInput
from .deps import audited, need, on_loop
from .problems import PROBLEM_RESPONSES, error_response

__all__ = ["router"]

router = APIRouter(prefix="/v1", responses=PROBLEM_RESPONSES, tags=["approvals"])
DECIDE_ERRORS: dict[int | str, dict[str, Any]] = {
    403: error_response("The link is bound to another approver, or the caller is no longer authorized"),
    404: error_response("Unknown (or malformed) link"),
    409: error_response("Already decided (the original decision is in `decision`), or the run moved on"),
    410: error_response("The link expired or was revoked"),
}
OPERATE_ERRORS: dict[int | str, dict[str, Any]] = {
    404: error_response("No such run, step or link in the caller's tenant"),
    409: error_response("The run is not waiting for this approval"),
    410: error_response("The run was purged: the problem says when, by whom and why (its tombstone)"),
}


def _approvals(request: Request) -> Approvals:
    a: Approvals = request.app.state.approvals
    return a


Appr = Annotated[Approvals, Depends(on_loop(_approvals))]


class DecideRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # Any length: malformed tokens get the same 404 as unknown ones (no hint about the format).
    token: str = Field(max_length=10_000)
    decision: str = Field(pattern="^(approve|reject)$")
    comment: str | None = Field(default=None, max_length=2000)
    values: dict[str, Any] | None = Field(
        default=None, description="the approval form's values by field name (a step with a form only)"
    )


class RequestDecision(BaseModel):
    model_config = ConfigDict(extra="forbid")
    decision: str = Field(pattern="^(approve|reject)$")
    comment: str | None = Field(default=None, max_length=2000)
    values: dict[str, Any] | None = Field(
        default=None, description="the approval form's values by field name (a step with a form only)"
    )


class LinkRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    approver: str = Field(min_length=1, max_length=64)
    expires_in: str | None = Field(
        default=None, max_length=32, description="e.g. 1d; never beyond the step timeout"
    )


class ReassignRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    old: str = Field(min_length=1, max_length=64)
    new: str = Field(min_length=1, max_length=64)
    reason: str = Field(min_length=1, max_length=2000)


class RevokeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(min_length=1, max_length=2000)


@router.post(
    "/approvals/decide",
    response_model=DecisionResult,
    responses=DECIDE_ERRORS,
    summary="Approve or reject with a link you were sent",
)
def decide(
    body: DecideRequest, appr: Appr, p: Annotated[Principal, Depends(audited("approve", "approval.decide"))]
) -> DecisionResult:
    return appr.decide(p, body.token, body.decision, body.comment, channel="api", values=body.values)


BY_REQUEST_ERRORS: dict[int | str, dict[str, Any]] = {
    422: error_response("The form's values were not accepted (`fields` says what is wrong with each)"),
    403: error_response("The caller may not decide this request (not an approver, the initiator)"),
    404: error_response("No such request in the caller's tenant"),
    409: error_response("Already decided by the caller, or the request is closed"),
    410: error_response("The request expired"),
}


@router.post(
    "/approvals/{request_id:path}/decide",
    response_model=DecisionResult | MigrationRequestView,
    responses=BY_REQUEST_ERRORS,
    summary="Approve or reject a request by its id (from the inbox) with your own key, no link",
)
def decide_request(
    request_id: str,
    body: RequestDecision,
    appr: Appr,
    p: Annotated[Principal, Depends(audited("approve", "approval.decide"))],
) -> DecisionResult | MigrationRequestView:
    """A migration request's id (`mig_...`, kind `migration` in the inbox) is decided the same way, with
    the same checks; its answer is the migration request after the decision."""
    return appr.decide_by_request(p, request_id, body.decision, body.comment, values=body.values)


@router.get(
    "/approvals/inbox", response_model=list[InboxItem], summary="Pending requests the caller may decide"
)
def inbox(appr: Appr, p: Annotated[Principal, Depends(need("approve"))]) -> list[InboxItem]:
    return appr.inbox(p)


@router.post(
    "/runs/{run_id}/approvals/{step}/links",
    response_model=MintedLink,
    responses=OPERATE_ERRORS,
    status_code=201,
    summary="Mint a fresh link for one approver (the token is shown once)",
)
def mint(
    run_id: str, step: str, body: LinkRequest, appr: Appr, p: Annotated[Principal, Depends(need("operate"))]
) -> MintedLink:
    expires: timedelta | None = None
    if body.expires_in:
        try:
            expires = parse_duration(body.expires_in)
        except ValueError as exc:
            raise InvalidInput(f"expires_in: {exc}") from None
    return appr.mint(p.tenant, run_id, step, body.approver, expires_in=expires, by=p.name)


@router.get(
    "/runs/{run_id}/approvals/links",
    response_model=list[LinkView],
    responses=OPERATE_ERRORS,
    summary="Links of the run's pending request (never the tokens)",
)
def links(run_id: str, appr: Appr, p: Annotated[Principal, Depends(need("operate"))]) -> list[LinkView]:
    return appr.links(p.tenant, run_id)


@router.post(
    "/runs/{run_id}/approvals/{step}/reassign",
    response_model=Reassigned,
    responses=OPERATE_ERRORS,
    summary="Replace an approver on a pending request",
)
def reassign(
    run_id: str,
    step: str,
    body: ReassignRequest,
    appr: Appr,
    p: Annotated[Principal, Depends(need("operate"))],
) -> Reassigned:
    return appr.reassign(p.tenant, run_id, step, body.old, body.new, body.reason, actor=p.name)


@router.post(
    "/approvals/links/{link_id}/revoke",
    response_model=RevokedLink,
    responses=OPERATE_ERRORS,
    summary="Revoke a pending link",
)
def revoke(
    link_id: str, body: RevokeRequest, appr: Appr, p: Annotated[Principal, Depends(need("operate"))]
) -> RevokedLink:
    return appr.revoke(p.tenant, link_id, body.reason, actor=p.name)
