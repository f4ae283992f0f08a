"""Headers and escaping of everything the app serves: a walk over every route, and the /problems pages.

The walk enumerates `app.routes` (so a route added later is walked without editing this file), calls
each with hostile path parameters, query strings, form fields and a hostile flash cookie, anonymously,
with a UI session and with an API key, follows local redirects once, and collects every finding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import quote

import fastapi.routing
import httpx
import pytest
from fastapi import FastAPI
from fastapi import params as fastapi_params
from fastapi.routing import APIRoute
from starlette.routing import Mount, Route

from lockstep.api.app import create_app
from lockstep.app.principals import Principals
from lockstep.engine import Engine

from .conftest import FakeClock, Tenant, assert_problem


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Any, clock: FakeClock) -> Any:
    """This module's walks and pages run on both backends (the shared fixture is SQLite only)."""
    sqlite = request.param == "sqlite"
    url = f"sqlite:///{tmp_path}/db.sqlite" if sqlite else str(request.getfixturevalue("pg_url"))
    e = Engine.open(url, clock=clock)
    try:
        yield e
    finally:
        e.close()


pytestmark = pytest.mark.anyio

XSS_SCRIPT = "<script>alert(1)</script>"
XSS_ATTR = '"><img src=x onerror=alert(1)>'
JS_URL = "javascript:alert(1)"
OFFSITE = "//evil.example/\\evil.example"
HOSTILE = (XSS_SCRIPT, XSS_ATTR, JS_URL, OFFSITE)
SESSION_COOKIE = "lockstep_session"
FLASH_COOKIE = "lockstep_flash"
URL_ATTRS = {"href", "src", "action", "formaction", "xlink:href"}
WALKER_DEFINITION = {
    "name": "walk",
    "input_schema": {"type": "object", "required": ["po"]},
    "steps": [
        {
            "id": "sign-off",
            "approval": {
                "approvers": {"users": ["walker"]},
                "quorum": 1,
                "timeout": "3d",
                "details": "Approve ${input.po}",
            },
        }
    ],
}


class _Attrs(HTMLParser):
    """Collects the URL-valued attributes and the script tags of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.scripts: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in URL_ATTRS and value is not None:
                self.urls.append(value)
        if tag == "script":
            self.scripts.append(dict(attrs))


def html_findings(where: str, resp: httpx.Response) -> list[str]:
    """What is wrong with one HTML response: a missing header, or request text reflected unescaped."""
    out = []
    h = resp.headers
    csp = h.get("content-security-policy", "")
    directives = {d.split()[0]: d for d in (p.strip() for p in csp.split(";")) if d}
    if "default-src" not in directives:
        out.append(f"{where}: no Content-Security-Policy with default-src ({csp!r})")
    if "'unsafe-inline'" in directives.get("script-src", directives.get("default-src", "")):
        out.append(f"{where}: CSP allows inline script")
    if directives.get("frame-ancestors") != "frame-ancestors 'none'":
        out.append(f"{where}: CSP lacks frame-ancestors 'none'")
    if "base-uri" not in directives or "object-src" not in directives:
        out.append(f"{where}: CSP lacks base-uri or object-src")
    expected = {
        "x-content-type-options": "nosniff",
        "x-frame-options": "DENY",
        "referrer-policy": "no-referrer",
        "cache-control": "no-store",
    }
    out += [f"{where}: {k} is {h.get(k)!r}, not {v!r}" for k, v in expected.items() if h.get(k) != v]
    body = resp.text
    out += [f"{where}: {p!r} reflected unescaped" for p in HOSTILE[:2] if p in body]
    parsed = _Attrs()
    parsed.feed(body)
    out += [
        f"{where}: URL attribute {u!r}" for u in parsed.urls if u.strip().lower().startswith("javascript:")
    ]
    nonce = re.search(r"'nonce-([^']+)'", directives.get("script-src", ""))
    for s in parsed.scripts:
        if s.get("src") is None and (nonce is None or s.get("nonce") != nonce.group(1)):
            out.append(f"{where}: an inline <script> without the response's nonce")
    return out


def response_findings(where: str, resp: httpx.Response) -> list[str]:
    out = []
    if resp.status_code >= 500:
        out.append(f"{where}: {resp.status_code} {resp.text[:200]}")
    if resp.headers.get("x-content-type-options") != "nosniff":
        out.append(f"{where}: no X-Content-Type-Options: nosniff ({resp.headers.get('content-type')})")
    if resp.headers.get("content-type", "").startswith("text/html"):
        out += html_findings(where, resp)
    if resp.is_redirect:
        target = resp.headers.get("location", "")
        if not target.startswith("/") or target.startswith(("//", "/\\")):
            out.append(f"{where}: redirect off this origin to {target!r}")
        for k, v in {"referrer-policy": "no-referrer", "cache-control": "no-store"}.items():
            if resp.headers.get(k) != v:
                out.append(f"{where}: redirect with {k} {resp.headers.get(k)!r}, not {v!r}")
    return out


@dataclass
class Walk:
    """The app under test, the identities it is called as, and real values for path parameters."""

    app: FastAPI
    api_key: str
    principals: Principals
    walker: Any
    real: dict[str, str] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)
    problem_codes: set[str] = field(default_factory=set)
    calls: int = 0

    async def send(
        self, method: str, url: str, cookies: dict[str, str], headers: dict[str, str], **kw: Any
    ) -> httpx.Response:
        # A fresh client per request: cookies of one call (flash, login CSRF) never leak into the next.
        transport = httpx.ASGITransport(app=self.app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", cookies=cookies) as c:
            self.calls += 1
            return await c.request(method, url, headers=headers, **kw)

    def identities(self) -> list[tuple[str, dict[str, str], dict[str, str], str]]:
        """(name, cookies, headers, csrf) for anonymous, a fresh UI session, and an API key."""
        cookie, csrf = self.principals.open_session(self.walker)
        session = {SESSION_COOKIE: cookie, FLASH_COOKIE: quote(XSS_SCRIPT + XSS_ATTR)}
        return [
            ("anonymous", {}, {}, ""),
            ("session", session, {}, csrf),
            ("api-key", {}, {"Authorization": f"Bearer {self.api_key}"}, ""),
        ]

    async def call(self, method: str, url: str, e: Endpoint, payload: str) -> None:
        for who, cookies, headers, csrf in self.identities():
            kw: dict[str, Any] = {}
            if method == "POST" and e.form:
                kw["data"] = {**dict.fromkeys(e.form, payload), "csrf": csrf}
            elif method in ("POST", "PUT", "PATCH"):
                kw["json"] = {"reason": payload, "definition": payload, "input": {"x": payload}}
            where = f"{method} {url} as {who}"
            resp = await self.send(method, url, cookies, headers, **kw)
            self.findings += response_findings(where, resp)
            if resp.headers.get("content-type", "").startswith("application/problem+json"):
                self.problem_codes.add(resp.json()["code"])
            target = resp.headers.get("location", "")
            if resp.is_redirect and target.startswith("/") and not target.startswith("//"):
                jar = {**cookies, **dict(resp.cookies)}
                after = await self.send("GET", target, jar, headers)
                self.findings += response_findings(f"{where} -> GET {target}", after)


@dataclass(frozen=True)
class Endpoint:
    """One route of the app as the walk sees it: its full path and what it reads from a request."""

    path: str
    methods: frozenset[str]
    mount: bool
    params: tuple[str, ...]
    query: tuple[str, ...]
    form: tuple[str, ...]


def endpoints(app: FastAPI) -> list[Endpoint]:
    """Every route of the app, included routers flattened (newer FastAPI keeps them nested)."""
    flat = getattr(fastapi.routing, "iter_route_contexts", lambda routes: routes)(app.routes)
    out = []
    for r in flat:
        original = getattr(r, "original_route", r)
        assert isinstance(original, Route | Mount), f"a route kind the walk does not know: {original!r}"
        dependant = getattr(r, "dependant", None) if isinstance(original, APIRoute) else None
        out.append(
            Endpoint(
                path=r.path,
                methods=frozenset({"GET"} if isinstance(original, Mount) else r.methods or ()),
                mount=isinstance(original, Mount),
                params=tuple(r.param_convertors) if not isinstance(original, Mount) else (),
                query=tuple(q.alias for q in dependant.query_params) if dependant else (),
                form=tuple(
                    f.alias for f in dependant.body_params if isinstance(f.field_info, fastapi_params.Form)
                )
                if dependant
                else (),
            )
        )
    return out


def query_string(e: Endpoint, payload: str) -> str:
    return "?" + "&".join(f"{quote(n)}={quote(payload, safe='')}" for n in [*e.query, "q"])


def urls(e: Endpoint, payload: str, real: dict[str, str]) -> list[str]:
    """The route's path with every parameter set to the payload, and (where known) to a real value."""
    if e.mount:
        return [f"{e.path}/{quote(payload, safe='')}", f"{e.path}/{real.get(e.path, 'x')}"]
    fill = [dict.fromkeys(e.params, quote(payload, safe=""))]
    if e.params and all(n in real for n in e.params):
        fill.append({n: real[n] for n in e.params})
    return [_fill(e.path, values) for values in fill]


def _fill(path: str, values: dict[str, str]) -> str:
    return re.sub(r"{(\w+)(?::\w+)?}", lambda m: values[m.group(1)], path)


async def walk(app: FastAPI, w: Walk) -> None:
    for e in endpoints(app):
        for method in sorted(e.methods - {"HEAD"}):
            for payload in HOSTILE:
                for url in urls(e, payload, w.real):
                    await w.call(method, url + query_string(e, payload), e, payload)


async def make_walk(engine: Engine, principals: Principals, acme: Tenant, *, ui: bool) -> Walk:
    app = create_app(engine.service, ui=ui)
    principals.create_user("acme", "walker", ["admin", "approver"], ["finance"])
    walker = principals.principal("acme", "walker")
    assert walker is not None
    svc = engine.service
    svc.publish("acme", WALKER_DEFINITION)
    # Stored text is hostile too: it comes back on the run, events and approval pages.
    run = svc.start("acme", "walk", input={"po": XSS_SCRIPT + XSS_ATTR}, actor="operator")
    run_id = run.run_id
    token = app.state.approvals.mint("acme", run_id, "sign-off", "walker", by=XSS_ATTR).token
    real = {"run_id": run_id, "token": token, "code": "not-found", "/ui/static": "style.css"}
    return Walk(app, acme.keys["admin"], principals, walker, real)


@pytest.mark.parametrize("ui", [True, False], ids=["with-ui", "api-only"])
async def test_every_route_sets_security_headers_and_never_reflects_request_text(
    engine: Engine, principals: Principals, acme: Tenant, ui: bool
):
    """Every route, called with hostile parameters as anyone: headers set, nothing reflected, no 500."""
    w = await make_walk(engine, principals, acme, ui=ui)
    await walk(w.app, w)
    assert w.calls > (200 if ui else 50)
    assert w.findings == [], f"{len(w.findings)} findings:\n" + "\n".join(w.findings[:40])
    # Every problem `type` the walk was answered with links to a page that exists.
    assert len(w.problem_codes) >= 5
    for code in w.problem_codes:
        r = await w.send("GET", f"/problems/{code.replace('_', '-')}", {}, {})
        assert r.status_code == 200, code


async def test_problem_pages_exist_for_known_codes_only(client: httpx.AsyncClient):
    """/problems/{code} is a page for a code the app can answer with, and a 404 problem for anything else."""
    page = await client.get("/problems/not-found")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "not-found" in page.text
    known_by_pattern = (
        "unauthenticated",  # an error class's `code = ...`
        "not-skippable",  # Rejected("...") in the core
        "already-decided",  # code="..." when raising
        "invalid-request",  # problem(status, "...") in the API
        "method-not-allowed",  # a lookup table assigned to `code`
        "http-error",  # its default
    )
    for known in known_by_pattern:
        assert (await client.get(f"/problems/{known}")).status_code == 200, known
    for bad in ("no-such-code", XSS_SCRIPT, "not_found", "NOT-FOUND", "replace"):
        r = await client.get(f"/problems/{quote(bad, safe='')}")
        body = assert_problem(r, 404, "not_found")
        assert "<" not in body["detail"]


async def test_problem_page_does_not_reflect_markup(client: httpx.AsyncClient):
    """The reported XSS: an <img onerror> in the /problems path is never written into an HTML page."""
    r = await client.get("/problems/%3Cimg%20src=x%20onerror=alert(1)%3E")
    body = assert_problem(r, 404, "not_found")
    assert "<img" not in body["detail"]
    # The path stays in `instance` (JSON, which a browser with nosniff never renders as HTML).
    assert r.headers["x-content-type-options"] == "nosniff"
