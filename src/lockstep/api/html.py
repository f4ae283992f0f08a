"""The one way the app answers a browser: HTML pages and the redirects between them.

Every page is a Jinja2 template rendered with autoescape on, and every page and redirect carries the same
headers: a strict Content-Security-Policy (no inline script except the page's own nonce, no framing, no
plugins, no <base>), nosniff, no referrer (approval links carry their token in the URL) and no-store
(pages show sessions and CSRF tokens). A route that answers HTML some other way is a defect; the route
walk in tests/api/test_web_security.py finds it.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["NosniffMiddleware", "content_security_policy", "env", "harden", "redirect", "render"]

_HERE = Path(__file__).parent
# The API's own pages (problem types, /docs) and the UI's pages share one environment, so one set of
# escaping rules and one set of headers applies to all of them.
env = Environment(
    loader=FileSystemLoader([str(_HERE / "templates"), str(_HERE.parent / "ui" / "templates")]),
    autoescape=select_autoescape(default=True, default_for_string=True),
    auto_reload=False,
)


def content_security_policy(nonce: str | None) -> str:
    """Scripts only from this origin or inline with this response's nonce; a redirect runs none."""
    return "; ".join(
        (
            "default-src 'none'",
            f"script-src 'self' 'nonce-{nonce}'" if nonce else "script-src 'none'",
            "style-src 'self'",
            "img-src 'self' data:",
            "connect-src 'self'",
            "font-src 'self'",
            "form-action 'self'",
            "frame-ancestors 'none'",
            "base-uri 'none'",
            "object-src 'none'",
        )
    )


def harden(resp: Response, nonce: str | None = None) -> Response:
    """Set the browser-facing security headers on a page or a redirect."""
    resp.headers["Content-Security-Policy"] = content_security_policy(nonce)
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["X-Frame-Options"] = "DENY"
    resp.headers["Referrer-Policy"] = "no-referrer"
    resp.headers["Cache-Control"] = "no-store"
    return resp


def render(name: str, ctx: dict[str, Any], status: int = 200) -> HTMLResponse:
    """A page from a template. The template gets `csp_nonce` for the one inline script it may have."""
    nonce = secrets.token_urlsafe(16)
    body = env.get_template(name).render({**ctx, "csp_nonce": nonce})
    resp = HTMLResponse(body, status_code=status)
    harden(resp, nonce)
    return resp


def redirect(url: str, status: int = 303) -> RedirectResponse:
    """A redirect a browser follows; `url` is a local path the caller built (request text in it is
    percent-quoted by Starlette, so it cannot become another origin or another header)."""
    resp = RedirectResponse(url, status_code=status)
    harden(resp)
    return resp


class NosniffMiddleware:
    """`X-Content-Type-Options: nosniff` on every response (JSON, problems, static files), so no answer
    of this origin can be sniffed into HTML or script by a browser."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if not any(k.lower() == b"x-content-type-options" for k, _ in headers):
                    headers.append((b"x-content-type-options", b"nosniff"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_header)
