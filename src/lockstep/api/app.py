"""The ASGI app: API under /v1, the operations UI under /ui, /metrics, /healthz, /openapi.json."""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .. import __version__
from ..approvals import Approvals
from ..errors import Unauthenticated
from ..observability import Metrics
from ..principals import Principals
from ..service import Service
from . import approvals, limits, problems, repair, routes, tasks

__all__ = ["create_app"]

DESCRIPTION = """A durable workflow engine for tenant-defined processes.

Authenticate with `Authorization: Bearer <API key>` (keys come from `lockstep users create`). Every
request is scoped to the key's tenant. Errors are RFC 9457 problem documents with a stable `type`."""


def create_app(
    service: Service,
    *,
    metrics_token: str | None = None,
    ui: bool = True,
    secure_cookies: bool = False,
    public_url: str = "http://127.0.0.1:8080",
) -> FastAPI:
    app = FastAPI(
        title="lockstep", version=__version__, description=DESCRIPTION, docs_url="/docs", redoc_url=None
    )
    app.state.service = service
    app.state.principals = Principals(service)
    app.state.approvals = Approvals(service, app.state.principals, public_url)
    app.state.metrics = Metrics(service)
    app.state.secure_cookies = secure_cookies
    problems.install(app)
    limits.install(app)  # body size (413) and JSON depth (422) before any route reads the body
    problems.with_problem_schema(app)
    app.include_router(routes.router)
    app.include_router(tasks.router)
    app.include_router(approvals.router)
    app.include_router(repair.router)

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, Any]:
        with service.read() as tx:
            tx.next_wakeup_ms()
        return {"ok": True}

    @app.get("/metrics", include_in_schema=False)
    def metrics(request: Request) -> Response:
        if metrics_token is not None:
            got = request.headers.get("authorization", "")
            if not hmac.compare_digest(got.encode(), f"Bearer {metrics_token}".encode()):
                raise Unauthenticated("/metrics needs `Authorization: Bearer <metrics token>`")
        return PlainTextResponse(generate_latest(app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/problems/{code}", include_in_schema=False, response_class=HTMLResponse)
    def problem_doc(code: str) -> str:
        return (
            f"<!doctype html><title>lockstep problem {code}</title><h1>{code}</h1>"
            "<p>See the <code>detail</code> field of the response for what went wrong and how to fix it.</p>"
        )

    if ui:
        from ..ui import mount  # noqa: PLC0415 - the UI is optional

        mount(app)

        @app.get("/", include_in_schema=False)
        def root() -> RedirectResponse:
            return RedirectResponse("/ui/", status_code=303)

    return app
