"""The audit page (/ui/audit): the logged-in admin's tenant's audit log, newest first, filtered by a GET
form and paged by a link; no script. Other roles get a 403 page (audited as `ui.page`)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from ..app.audit import ACTIONS, OUTCOMES, audit_filter
from ..errors import InvalidInput
from .pages import Session, page, principals_of, service_of

__all__ = ["router"]

router = APIRouter(prefix="/ui", include_in_schema=False)
PAGE_ROWS = 50


@router.get("/audit", response_class=HTMLResponse)
def audit_page(
    request: Request,
    session: Session,
    actor: str = "",
    action: str = "",
    outcome: str = "",
    since: str = "",
    until: str = "",
    cursor: str = "",
) -> HTMLResponse:
    me, csrf = session
    if not me.can("audit"):
        principals_of(request).audit(
            me.tenant, me.name, "ui.page", "/ui/audit", "refused", code="forbidden", permission="audit"
        )
        context = {
            "me": me,
            "csrf": csrf,
            "title": "Not allowed",
            "message": "The audit log is for admins of the tenant; your roles do not include it.",
        }
        return page(request, "message.html", context, 403)
    f = {"actor": actor, "action": action, "outcome": outcome, "since": since, "until": until}
    context = {"me": me, "csrf": csrf, "f": f, "actions": sorted(ACTIONS), "outcomes": OUTCOMES}
    try:
        where = audit_filter(
            actor=actor.strip() or None,
            action=action.strip() or None,
            outcome=outcome or None,
            since=since.strip() or None,
            until=until.strip() or None,
        )
        rows = service_of(request).audit.page(me.tenant, where, cursor=cursor or None, limit=PAGE_ROWS)
    except InvalidInput as exc:
        return page(request, "audit.html", {**context, "error": str(exc), "rows": [], "next": None}, 422)
    more = {**f, "cursor": rows.next} if rows.next else None
    return page(request, "audit.html", {**context, "rows": rows.items, "next": more})
