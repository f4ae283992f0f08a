"""/v1/retention: the caller's tenant's retention status and the tombstones of its purged runs (read
only: retention, holds and purges are the platform operator's, over the CLI)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from ..app.principals import Principal
from ..app.views import TenantRetention, TombstoneView
from .deps import Svc, need
from .problems import PROBLEM_RESPONSES

__all__ = ["router"]

router = APIRouter(prefix="/v1", responses=PROBLEM_RESPONSES)


@router.get(
    "/retention",
    response_model=TenantRetention,
    summary="The tenant's retention: setting, what is due and when, what is held, tombstones",
)
def retention_status(svc: Svc, p: Annotated[Principal, Depends(need("operate"))]) -> TenantRetention:
    return svc.retention.status(p.tenant).tenants[0]


@router.get(
    "/retention/tombstones",
    response_model=list[TombstoneView],
    summary="Tombstones of the tenant's purged runs (run id order, after the cursor)",
)
def tombstones(
    svc: Svc,
    p: Annotated[Principal, Depends(need("operate"))],
    after: Annotated[str, Query(max_length=64)] = "",
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[TombstoneView]:
    return svc.retention.tombstones(p.tenant, after=after, limit=limit)
