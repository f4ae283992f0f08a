"""The run-webhooks pages (/ui/webhooks): the tenant's subscriptions and, per subscription, its delivery
log (status, attempts, the receiver's last answer, next attempt) with a replay button (a POST with the
session's CSRF token, audited). Tenant admins only (permission `webhooks`); creating a subscription is
the CLI's and the API's (its secret is shown once, which a page would keep in the browser's history)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, Response

from ..app.principals import Principal
from ..errors import LockstepError
from .pages import Session, check_csrf, flash_redirect, page, principals_of, service_of

__all__ = ["router"]

router = APIRouter(prefix="/ui", include_in_schema=False)
PAGE = "/ui/webhooks"


def _refused(request: Request, session: tuple[Principal, str], target: str) -> HTMLResponse:
    me, csrf = session
    principals_of(request).audit(
        me.tenant, me.name, "ui.page", target[:200], "refused", code="forbidden", permission="webhooks"
    )
    context = {"me": me, "csrf": csrf, "title": "Not allowed", "message": "Webhooks are for tenant admins."}
    return page(request, "message.html", context, 403)


@router.get("/webhooks", response_class=HTMLResponse)
def webhooks_page(request: Request, session: Session) -> HTMLResponse:
    me, csrf = session
    if not me.can("webhooks"):
        return _refused(request, session, PAGE)
    subs = service_of(request).webhooks.subscriptions(me.tenant)
    return page(request, "webhooks.html", {"me": me, "csrf": csrf, "subscriptions": subs, "sub": None})


@router.get("/webhooks/{sub_id}", response_class=HTMLResponse)
def deliveries_page(request: Request, sub_id: str, session: Session) -> Response:
    me, csrf = session
    if not me.can("webhooks"):
        return _refused(request, session, f"{PAGE}/{sub_id}")
    hooks = service_of(request).webhooks
    try:
        rows = hooks.deliveries(me.tenant, sub_id, 200)
    except LockstepError as exc:
        context = {"me": me, "csrf": csrf, "title": "Not found", "message": str(exc)}
        return page(request, "message.html", context, 404)
    (sub,) = [s for s in hooks.subscriptions(me.tenant) if s["id"] == sub_id]
    return page(request, "webhooks.html", {"me": me, "csrf": csrf, "sub": sub, "deliveries": rows})


@router.post("/webhooks/{sub_id}/deliveries/{delivery_id}/replay")
def replay(
    request: Request, sub_id: str, delivery_id: str, session: Session, csrf: Annotated[str, Form()] = ""
) -> Response:
    me, expected = session
    check_csrf(expected, csrf)
    back = f"{PAGE}/{quote(sub_id, safe='')}"
    if not me.can("webhooks"):
        return _refused(request, session, f"{back}/replay")
    try:
        service_of(request).webhooks.replay(me.tenant, sub_id, delivery_id, me.name)
        msg = f"Delivery {delivery_id} will be sent again (same webhook-id)."
    except LockstepError as exc:
        msg = f"Not replayed: {exc}"
    return flash_redirect(request, back, msg)
