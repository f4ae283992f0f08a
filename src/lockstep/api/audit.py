"""/v1/audit: the caller's tenant's audit log, for admins only (role `admin`: permission `audit`), a page
at a time or exported whole as JSON lines. Another role gets 403 (itself audited), no key 401."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import StreamingResponse

from ..app.audit import DEFAULT_PAGE, MAX_PAGE, audit_filter
from ..app.principals import Principal
from ..app.views import AuditPage
from ..store import AuditFilter
from .deps import Svc, need
from .problems import PROBLEM_RESPONSES, error_response

__all__ = ["router"]

router = APIRouter(prefix="/v1/audit", responses=PROBLEM_RESPONSES, tags=["audit"])
Admin = Annotated[Principal, Depends(need("audit"))]
NDJSON = "application/x-ndjson"
BAD_FILTER: dict[int | str, dict[str, Any]] = {
    422: error_response("A filter or the cursor is malformed (the detail names it and says what to write)")
}

Actor = Annotated[str | None, Query(max_length=200, description="Only this user's rows")]
Action = Annotated[
    str | None,
    Query(max_length=100, description="An action name (repair.pause) or a prefix ending in '.' (repair.)"),
]
Outcome = Annotated[str | None, Query(max_length=20, description="ok, refused, throttled or failed")]
Since = Annotated[str | None, Query(max_length=40, description="Rows at or after this time (RFC 3339)")]
Until = Annotated[str | None, Query(max_length=40, description="Rows before this time (RFC 3339)")]


def _filters(
    actor: Actor = None,
    action: Action = None,
    outcome: Outcome = None,
    since: Since = None,
    until: Until = None,
) -> dict[str, str | None]:
    """The filters both routes take, as query parameters; a route checks them (audit_filter) once
    FastAPI has checked every parameter, so a bad one is a 422 naming it, as it always was."""
    return {"actor": actor, "action": action, "outcome": outcome, "since": since, "until": until}


def _page(
    cursor: Annotated[str | None, Query(max_length=100, description="`next` of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE,
) -> tuple[str | None, int]:
    """Where a page starts, and its length: a dependency like the filters, so that the API document
    lists them after the filters (FastAPI lists a route's own parameters before its dependencies')."""
    return cursor, limit


Filters = Annotated[dict[str, str | None], Depends(_filters)]
Page = Annotated[tuple[str | None, int], Depends(_page)]


@router.get(
    "",
    response_model=AuditPage,
    responses=BAD_FILTER,
    summary="The tenant's audit log, newest first, a page at a time",
)
def audit_page(svc: Svc, p: Admin, filters: Filters, page: Page) -> AuditPage:
    cursor, limit = page
    return svc.audit.page(p.tenant, audit_filter(**filters), cursor=cursor, limit=limit)


@router.get(
    "/export",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "One audit row per line (JSON lines), newest first, every row that matches",
            "content": {NDJSON: {"schema": {"$ref": "#/components/schemas/AuditEntry"}}},
        },
        **BAD_FILTER,
    },
    summary="Export the tenant's audit log as JSON lines (streamed, same filters as the list)",
)
def audit_export(svc: Svc, p: Admin, filters: Filters) -> StreamingResponse:
    where = audit_filter(**filters)  # a bad filter is refused before anything
    svc.audit.record(p.tenant, p.name, "audit.export", None, "ok", channel="api", **_described(where))
    rows = svc.audit.export(p.tenant, where)

    def lines() -> Iterator[bytes]:
        for row in rows:
            yield row.model_dump_json().encode() + b"\n"

    # A sync iterator: Starlette reads it in a worker thread, one page (one read transaction) at a time.
    return StreamingResponse(lines(), media_type=NDJSON)


def _described(where: AuditFilter) -> dict[str, Any]:
    """The filters of an export, for its own audit row."""
    return {k: v for k, v in asdict(where).items() if v is not None}
