"""The schedules page (/ui/schedules): the tenant's schedules with their next fire times (a paused one:
since when and by whom it is paused, never fire times that will start nothing) and what their last slots
did, read only for every role that reads runs; users who may change schedules (permission
`schedule`) get a pause form (with a reason) or a resume button, each with the session's CSRF token.
Creating and changing schedules is the CLI's and the API's (issue 21 brings more of it here)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, Response

from ..api import html
from ..app.principals import Principal
from ..app.schedules import paused_since
from ..errors import LockstepError
from .pages import Session, check_csrf, flash_redirect, page, principals_of, service_of

__all__ = ["router"]

router = APIRouter(prefix="/ui", include_in_schema=False)
PAGE = "/ui/schedules"
html.env.filters["paused_since"] = paused_since  # what a paused schedule shows instead of fire times


@router.get("/schedules", response_class=HTMLResponse)
def schedules_page(request: Request, session: Session) -> HTMLResponse:
    me, csrf = session
    if not me.can("read"):
        principals_of(request).audit(
            me.tenant, me.name, "ui.page", PAGE, "refused", code="forbidden", permission="read"
        )
        context = {
            "me": me,
            "csrf": csrf,
            "title": "Not allowed",
            "message": "Schedules are shown to the tenant's admins, operators and viewers.",
        }
        return page(request, "message.html", context, 403)
    rows = service_of(request).schedules.list(me.tenant)
    return page(request, "schedules.html", {"me": me, "csrf": csrf, "schedules": rows})


@router.post("/schedules/{name}/pause")
def pause(
    request: Request,
    name: str,
    session: Session,
    csrf: Annotated[str, Form()] = "",
    reason: Annotated[str, Form()] = "",
) -> Response:
    return _change(request, session, name, csrf, "pause", reason.strip())


@router.post("/schedules/{name}/resume")
def resume(request: Request, name: str, session: Session, csrf: Annotated[str, Form()] = "") -> Response:
    return _change(request, session, name, csrf, "resume", "")


def _change(
    request: Request, session: tuple[Principal, str], name: str, csrf: str, what: str, reason: str
) -> Response:
    me, expected = session
    check_csrf(expected, csrf)
    if not me.can("schedule"):
        target = f"{PAGE}/{name}/{what}"[:200]
        principals_of(request).audit(
            me.tenant, me.name, "ui.page", target, "refused", code="forbidden", permission="schedule"
        )
        return flash_redirect(request, PAGE, f"Not changed: your roles may not {what} schedules.")
    schedules = service_of(request).schedules
    try:
        if what == "pause":
            schedules.pause(me.tenant, name, reason=reason or None, actor=me.name)
            msg = f"Schedule {name} paused: it starts nothing until it is resumed."
        else:
            view = schedules.resume(me.tenant, name, actor=me.name)
            msg = f"Schedule {name} resumed: its next slot is {view.next_fire_at}."
    except LockstepError as exc:
        msg = f"Not changed: {exc}"
    return flash_redirect(request, PAGE, msg)
