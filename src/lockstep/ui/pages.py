"""What every UI page shares: the logged-in session, the CSRF check, the one-time flash message and the
page renderer (with the template filters it relies on). The run pages (routes.py) and the approval
pages (approve.py) both build on this module and not on each other."""

from __future__ import annotations

import hmac
import json
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import quote, unquote

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from ..api import html
from ..app.principals import Principal, Principals
from ..app.service import Service
from ..app.views import plain
from ..core.narrate import narrate
from ..core.sealed import REDACTED, text_of
from ..core.timeutil import format_duration, parse_iso

__all__ = [
    "FLASH_COOKIE",
    "SESSION_COOKIE",
    "CsrfRejected",
    "LoginRequired",
    "Session",
    "check_csrf",
    "flash_redirect",
    "page",
    "principals_of",
    "service_of",
]

SESSION_COOKIE = "lockstep_session"
FLASH_COOKIE = "lockstep_flash"


class LoginRequired(Exception):
    pass


class CsrfRejected(Exception):
    pass


def _ago(at: str | None, now: datetime | None = None) -> str:
    if not at:
        return ""
    return format_duration((now or datetime.now(UTC)) - parse_iso(at)) + " ago"


def _until(at: str | None, now: datetime | None = None) -> str:
    if not at:
        return ""
    delta = parse_iso(at) - (now or datetime.now(UTC))
    return (
        ("in " + format_duration(delta))
        if delta.total_seconds() >= 0
        else format_duration(-delta) + " overdue"
    )


def _detail_value(value: object) -> str:
    """An audit detail as people read it: a list as its items, none as a dash, text as it is, the
    rest as compact JSON (never Python's repr: ['a'] and None mean nothing to an auditor)."""
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        return ", ".join(str(v) for v in value) if value else "(none)"
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


html.env.filters["ago"] = _ago
html.env.filters["until"] = _until
html.env.filters["pretty"] = lambda v: json.dumps(plain(v), indent=2, ensure_ascii=False, sort_keys=True)
html.env.globals["narrate"] = narrate
html.env.filters["text"] = text_of  # a redaction marker in a sentence: [sensitive]
html.env.filters["detail_value"] = _detail_value
html.env.tests["redaction"] = lambda v: type(v) is dict and REDACTED in v  # {"$redacted": ...}


def service_of(request: Request) -> Service:
    s: Service = request.app.state.service
    return s


def principals_of(request: Request) -> Principals:
    p: Principals = request.app.state.principals
    return p


def _session(request: Request) -> tuple[Principal, str]:
    cookie = request.cookies.get(SESSION_COOKIE)
    found = principals_of(request).session(cookie) if cookie else None
    if found is None:
        raise LoginRequired
    return found


Session = Annotated[tuple[Principal, str], Depends(_session)]


def check_csrf(expected: str, got: str) -> None:
    if not got or not hmac.compare_digest(expected.encode(), got.encode()):
        raise CsrfRejected("the form's CSRF token is missing or wrong: reload the page and try again")


def flash_redirect(request: Request, url: str, message: str) -> RedirectResponse:
    """Redirect with a one-time message kept in a short-lived cookie: a URL parameter would let any link
    show forged messages, and would come back on every reload."""
    resp = html.redirect(url)
    resp.set_cookie(
        FLASH_COOKIE,
        quote(message[:500]),
        max_age=60,
        httponly=True,
        samesite="strict",
        path="/",
        secure=request.app.state.secure_cookies,
    )
    return resp


def page(request: Request, name: str, ctx: dict[str, Any], status: int = 200) -> HTMLResponse:
    # Relative times use the service's clock, so pages agree with `lockstep show` (and with test clocks).
    flash = unquote(request.cookies.get(FLASH_COOKIE, ""))
    ctx = {"now": service_of(request).clock(), "flash": flash, **ctx}
    resp = html.render(name, ctx, status)
    if flash:
        resp.delete_cookie(FLASH_COOKIE, path="/")
    return resp
