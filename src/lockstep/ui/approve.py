"""Approval pages: /approve/{token} (look, then decide with a CSRF-protected POST) and the inbox.

GET never acts. The logged-in identity must be the approver the link was issued to; the link alone
authorizes nothing. Pages and redirects come from api/html.py, which sets `Referrer-Policy: no-referrer`
and `Cache-Control: no-store` on every one, so the token in the URL leaks neither to other sites nor to
caches.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, Response
from markupsafe import Markup, escape

from ..api import html
from ..app.approvals import Approvals
from ..app.principals import Principal
from ..app.views import ApprovalPage
from ..core.canonical import JSONObject
from ..core.form import check_values, from_text
from ..errors import Conflict, Forbidden, Gone, InvalidInput, LockstepError, NotFound
from .pages import CsrfRejected, Session, check_csrf, page, service_of

# The approval form's inputs are named with this prefix, so no field can shadow csrf, decision or comment.
FIELD = "field_"

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


def _code_spans(text: str) -> Markup:
    """An outcome's `step` names as code; everything else escaped (a step id is the author's text)."""
    return Markup(re.sub(r"`([^`<>]*)`", r"<code>\1</code>", str(escape(text))))  # noqa: S704


html.env.filters["code_spans"] = _code_spans


def _approvals(request: Request) -> Approvals:
    a: Approvals = request.app.state.approvals
    return a


def _status(exc: LockstepError) -> int:
    for cls, code in ((NotFound, 404), (Gone, 410), (Conflict, 409), (Forbidden, 403)):
        if isinstance(exc, cls):
            return code
    return 400


def _refused(request: Request, session: tuple[Principal, str], exc: LockstepError) -> Response:
    titles = {
        "already_decided": "Already handled",
        "expired": "This link has expired",
        "revoked": "This link was revoked",
        "not_bound": "This link is not yours",
        "unknown_link": "Unknown link",
        "not_waiting": "No longer waiting",
    }
    return page(
        request,
        "message.html",
        {
            "me": session[0],
            "csrf": session[1],
            "title": titles.get(exc.code, "Not possible"),
            "message": str(exc),
        },
        _status(exc),
    )


async def _posted(request: Request) -> dict[str, str]:
    """The form's fields as posted (text by field name); FastAPI parses the body once for Form() too."""
    data = await request.form()
    return {k[len(FIELD) :]: v for k, v in data.items() if k.startswith(FIELD) and isinstance(v, str)}


Posted = Annotated[dict[str, str], Depends(_posted)]


def _form_of(view: ApprovalPage) -> list[JSONObject]:
    a = view.approval
    form = a.get("policy", {}).get("form") if isinstance(a, dict) else None
    return [dict(f) for f in form] if isinstance(form, list) else []


def _values(
    view: ApprovalPage, posted: dict[str, str], decision: str
) -> tuple[JSONObject | None, dict[str, str]]:
    """The values to decide with (None: the step has no form) and, by field, what is wrong: every field
    at once (text that is not of its type, then the form's rules), so one round trip shows them all."""
    form = _form_of(view)
    if not form:
        return None, {}
    values, unreadable = from_text(form, posted)
    _clean, wrong = check_values(form, values, decision)
    return values, {**wrong, **unreadable}


def _view_or_none(load: Callable[[], ApprovalPage]) -> ApprovalPage | None:
    """The page of the request (for its form), or None when the caller may not see it: the decision
    itself then answers, with its own refusal and audit row."""
    try:
        return load()
    except LockstepError:
        return None


def _with_errors(
    request: Request, session: tuple[Principal, str], view: ApprovalPage, ctx: dict[str, Any]
) -> Response:
    """The approval page again, the errors next to their fields and what was typed kept (nothing was
    recorded)."""
    me, csrf = session
    context = {"me": me, "csrf": csrf, "link": view.link, "run": view.run, "approval": view.approval}
    context = {**context, "outcomes": view.outcomes, **ctx}
    return page(request, "approve.html", context, 422)


@router.get("/approve/{token}", response_class=HTMLResponse)
def approve_page(request: Request, token: str, session: Session) -> Response:
    me, csrf = session
    try:
        view = _approvals(request).inspect(me, token)
    except LockstepError as exc:
        return _refused(request, session, exc)
    context = {
        "me": me,
        "csrf": csrf,
        "token": token,
        "link": view.link,
        "run": view.run,
        "approval": view.approval,
        "outcomes": view.outcomes,
    }
    return page(request, "approve.html", context)


def _decision_csrf(
    request: Request, session: tuple[Principal, str], csrf: str, channel: str
) -> tuple[Principal, str]:
    """The session of a decision whose CSRF token matches; a mismatch is audited, then refused."""
    me, expected = session
    try:
        check_csrf(expected, csrf)
    except CsrfRejected:
        _approvals(request).principals.audit(
            me.tenant, me.name, "approval.decide", None, "refused", code="csrf", channel=channel
        )
        raise
    return me, expected


def _review_path(run_id: str, step: str) -> str:
    return f"/ui/approvals/{quote(run_id, safe='')}/{quote(step, safe='')}"


@router.post("/approve/{token}")
def approve_submit(
    request: Request,
    token: str,
    session: Session,
    posted: Posted,
    csrf: Annotated[str, Form()] = "",
    decision: Annotated[str, Form()] = "",
    comment: Annotated[str, Form()] = "",
) -> Response:
    me, expected = _decision_csrf(request, session, csrf, "ui")
    appr = _approvals(request)
    view = _view_or_none(lambda: appr.inspect(me, token))
    try:
        values, errors = _values(view, posted, decision) if view is not None else (None, {})
        if not errors:
            result = appr.decide(me, token, decision, comment or None, channel="ui", values=values)
    except InvalidInput as exc:
        if view is None:
            return _refused(request, session, exc)
        errors = dict(exc.extra.get("fields") or {"": str(exc)})  # type: ignore[call-overload]
    except LockstepError as exc:
        return _refused(request, session, exc)
    if errors and view is not None:
        ctx = {"token": token, "errors": errors, "posted": posted, "comment": comment}
        return _with_errors(request, session, view, ctx)
    return page(request, "decided.html", {"me": me, "csrf": expected, "result": result})


# How the inbox can be sorted: the soonest to expire first (the default), the oldest request first, or
# by process.
INBOX_SORTS = {
    "expires": lambda i: (i.expires_at, i.requested_at),
    "requested": lambda i: (i.requested_at, i.expires_at),
    "definition": lambda i: (i.definition.name, i.expires_at),
}


@router.get("/ui/approvals", response_class=HTMLResponse)
def inbox(request: Request, session: Session, sort: str = "expires", definition: str = "") -> Response:
    me, csrf = session
    items = _approvals(request).inbox(me) if me.can("approve") else []
    processes = sorted({i.definition.name for i in items})
    if definition:
        items = [i for i in items if i.definition.name == definition]
    sort = sort if sort in INBOX_SORTS else "expires"
    items = sorted(items, key=INBOX_SORTS[sort])
    return page(
        request,
        "inbox.html",
        {
            "me": me,
            "csrf": csrf,
            "items": items,
            "can_approve": me.can("approve"),
            "sort": sort,
            "definition": definition,
            "processes": processes,
        },
    )


@router.post("/ui/approvals/open")
def open_request(
    request: Request,
    session: Session,
    csrf: Annotated[str, Form()] = "",
    run_id: Annotated[str, Form()] = "",
    step: Annotated[str, Form()] = "",
) -> Response:
    """From the inbox: go to the request's review page. No link is minted: the approver is logged in,
    and a link authorizes nothing, so reviewing never grows the run's history."""
    _me, expected = session
    check_csrf(expected, csrf)
    return html.redirect(_review_path(run_id, step))


@router.get("/ui/approvals/{run_id}/{step}", response_class=HTMLResponse)
def review_page(request: Request, run_id: str, step: str, session: Session) -> Response:
    me, _csrf = session
    try:
        view = _approvals(request).request_view(me, run_id, step)
    except LockstepError as exc:
        return _refused(request, session, exc)
    return _review(request, session, view, revealed=False)


def _review(
    request: Request, session: tuple[Principal, str], view: ApprovalPage, *, revealed: bool
) -> Response:
    me, csrf = session
    context = {
        "me": me,
        "csrf": csrf,
        "token": None,
        "action": _review_path(view.link.run_id, view.link.step),
        "link": view.link,
        "run": view.run,
        "approval": view.approval,
        "outcomes": view.outcomes,
        "revealed": revealed,
    }
    return page(request, "approve.html", context)


@router.post("/ui/approvals/{run_id}/{step}/reveal", response_class=HTMLResponse)
def review_reveal(
    request: Request, run_id: str, step: str, session: Session, csrf: Annotated[str, Form()] = ""
) -> Response:
    """The review page with the request's sealed details shown, for an admitted approver holding the
    read_sensitive grant: a POST with the CSRF token (no link or prefetch reveals), audited either way."""
    me, expected = session
    check_csrf(expected, csrf)
    try:
        view = service_of(request).reveal.approval(me, run_id, step, channel="ui")
    except LockstepError as exc:
        return _refused(request, session, exc)
    return _review(request, session, view, revealed=True)


@router.post("/ui/approvals/{run_id}/{step}")
def review_submit(
    request: Request,
    run_id: str,
    step: str,
    session: Session,
    posted: Posted,
    csrf: Annotated[str, Form()] = "",
    decision: Annotated[str, Form()] = "",
    comment: Annotated[str, Form()] = "",
) -> Response:
    me, expected = _decision_csrf(request, session, csrf, "inbox")
    appr = _approvals(request)
    view = _view_or_none(lambda: appr.request_view(me, run_id, step))
    try:
        values, errors = _values(view, posted, decision) if view is not None else (None, {})
        if not errors:
            result = appr.decide_in_session(me, run_id, step, decision, comment or None, values=values)
    except InvalidInput as exc:
        if view is None:
            return _refused(request, session, exc)
        errors = dict(exc.extra.get("fields") or {"": str(exc)})  # type: ignore[call-overload]
    except LockstepError as exc:
        return _refused(request, session, exc)
    if errors and view is not None:
        ctx = {"token": None, "action": _review_path(run_id, step), "errors": errors, "posted": posted}
        return _with_errors(request, session, view, {**ctx, "comment": comment})
    return page(request, "decided.html", {"me": me, "csrf": expected, "result": result})
