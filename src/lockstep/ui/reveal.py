"""The run page with its sensitive values shown: a POST with the CSRF token (never a GET, so no link,
prefetch or history entry reveals anything), for a user with the read_sensitive grant; every reveal,
allowed or refused, is audited by the service."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse

from ..errors import LockstepError
from .pages import Session, check_csrf, page, service_of
from .runpage import run_diagram

__all__ = ["router"]

router = APIRouter(prefix="/ui", include_in_schema=False)


@router.post("/runs/{run_id}/reveal", response_class=HTMLResponse)
def reveal(
    request: Request, run_id: str, session: Session, csrf: Annotated[str, Form()] = ""
) -> HTMLResponse:
    me, expected = session
    check_csrf(expected, csrf)
    svc = service_of(request)
    try:
        run = svc.reveal.run(me, run_id, channel="ui")
        events = svc.reveal.events(me, run_id, channel="ui")
    except LockstepError as exc:
        status = 404 if exc.code == "not_found" else 403
        title = "Run not found" if status == 404 else "Not allowed"
        return page(
            request, "message.html", {"me": me, "csrf": expected, "title": title, "message": str(exc)}, status
        )
    return page(
        request,
        "run.html",
        {
            "me": me,
            "csrf": expected,
            "run": run,
            "events": events,
            "diagram": run_diagram(svc, me.tenant, run, events),
            "can_cancel": me.can("cancel"),
            "can_operate": me.can("operate"),
            "revealed": True,
            "holds": svc.retention.holding(me.tenant, run_id),
        },
    )
