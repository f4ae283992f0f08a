"""/v1/migrations: migrations that need approval, as operators see them (role operator or admin). The
approvers decide them with `POST /v1/approvals/{request_id}/decide` (api/approvals.py) and find them in
`GET /v1/approvals/inbox` (kind `migration`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query

from ..app.principals import Principal
from ..app.views import MigrationRequestView
from .deps import Svc, need
from .problems import PROBLEM_RESPONSES, error_response

__all__ = ["router"]

router = APIRouter(prefix="/v1/migrations", responses=PROBLEM_RESPONSES, tags=["repair"])
Operator = Annotated[Principal, Depends(need("operate"))]
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: error_response("No such request in the caller's tenant")}
Status = Literal["pending", "approved", "applied", "rejected", "expired"]


@router.get("", summary="The tenant's migration requests, newest first")
def requests(
    svc: Svc,
    p: Operator,
    status: Annotated[Status | None, Query()] = None,
    limit: int = Query(100, ge=1, le=500),
) -> list[MigrationRequestView]:
    return svc.migrations.requests(p.tenant, status, limit)


@router.get("/{request_id}", responses=NOT_FOUND, summary="One migration request: runs, decisions, outcomes")
def request(request_id: str, svc: Svc, p: Operator) -> MigrationRequestView:
    return svc.migrations.request(p.tenant, request_id)
