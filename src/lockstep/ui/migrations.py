"""Migrations that need approval in the UI: the approver's review page of one request (reached from the
inbox, where it is an item of kind `migration`) and the decision, a CSRF-protected POST with the checks
of every other path (app/migrations/decide.py). Opening the page changes nothing."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, Response

from ..errors import Conflict, Forbidden, Gone, LockstepError, NotFound
from .pages import Session, check_csrf, page, service_of

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


def _refused(request: Request, session: Session, exc: LockstepError) -> Response:
    status = next(
        (
            code
            for cls, code in ((NotFound, 404), (Gone, 410), (Conflict, 409), (Forbidden, 403))
            if isinstance(exc, cls)
        ),
        400,
    )
    me, csrf = session
    ctx = {"me": me, "csrf": csrf, "title": "Not possible", "message": str(exc)}
    return page(request, "message.html", ctx, status)


@router.get("/ui/migrations/{request_id}", response_class=HTMLResponse)
def review(request: Request, request_id: str, session: Session) -> Response:
    """The request, for an approver it waits for (in their inbox); anyone else is told it is not."""
    me, csrf = session
    svc = service_of(request)
    item = next((i for i in svc.migrations.inbox(me) if i.request_id == request_id), None)
    if item is None or item.migration is None:
        why = Conflict(
            f"migration request {request_id[:100]} is not waiting for your decision", code="not_waiting"
        )
        return _refused(request, session, why)
    ctx = {"me": me, "csrf": csrf, "item": item, "m": item.migration}
    return page(request, "migration.html", ctx)


@router.post("/ui/migrations/{request_id}", response_class=HTMLResponse)
def decide(
    request: Request,
    request_id: str,
    session: Session,
    csrf: Annotated[str, Form()] = "",
    decision: Annotated[str, Form()] = "",
    comment: Annotated[str, Form()] = "",
) -> Response:
    me, expected = session
    svc = service_of(request)
    check_csrf(expected, csrf)
    try:
        view = svc.migrations.decide(me, request_id, decision, comment or None, channel="inbox")
    except LockstepError as exc:
        return _refused(request, session, exc)
    said = {
        "pending": "The request still waits for more approvals.",
        "approved": "The quorum is met: the runs are being migrated.",
        "applied": "The quorum is met: the runs were migrated.",
        "rejected": "The migration is refused: no run changed.",
    }
    message = f"You chose {decision} for migration request {view.request_id}. {said.get(view.status, '')}"
    return page(
        request,
        "message.html",
        {"me": me, "csrf": expected, "title": "Decision recorded", "message": message},
    )
