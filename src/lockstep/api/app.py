"""The ASGI app: API under /v1, the operations UI under /ui, /metrics, /healthz, /openapi.json."""

from __future__ import annotations

import inspect
from typing import Any

from fastapi import FastAPI, Response

from .. import __version__
from ..app.service import Service
from . import approvals, audit, html, limits, metrics, pages, problems, repair, retention, routes, tasks
from . import events as event_routes
from . import migrations as migration_routes
from . import schedules as schedule_routes
from . import secrets as secret_routes
from . import webhooks as webhook_routes

__all__ = ["create_app"]

DESCRIPTION = """A durable workflow engine for tenant-defined processes.

Authenticate with `Authorization: Bearer <API key>` (keys come from `lockstep users create`). Every
request is scoped to the key's tenant. Errors are RFC 9457 problem documents with a stable `type`."""


def create_app(
    service: Service,
    *,
    metrics_token: str | None = None,
    metrics_public: bool = False,
    ui: bool = True,
    secure_cookies: bool = False,
    public_url: str = "http://127.0.0.1:8080",
) -> FastAPI:
    app = FastAPI(
        title="lockstep",
        version=__version__,
        description=DESCRIPTION,
        docs_url=None,
        redoc_url=None,
        **_telemetry(service),
    )
    app.add_middleware(html.NosniffMiddleware)
    app.state.service = service
    app.state.principals = service.principals
    app.state.approvals = service.approvals.linking_to(public_url)
    app.state.callbacks = service.callbacks.linking_to(public_url)
    app.state.metrics = service.metrics
    app.state.secure_cookies = secure_cookies
    problems.install(app)
    # Body size (413) and JSON depth (422), as the server is configured, before any route reads the body.
    limits.install(app, service.server_limits)
    problems.with_problem_schema(app)
    app.include_router(routes.router)
    app.include_router(tasks.router)
    app.include_router(approvals.router)
    app.include_router(repair.router)
    app.include_router(retention.router)
    app.include_router(audit.router)
    app.include_router(schedule_routes.router)
    app.include_router(event_routes.router)
    app.include_router(webhook_routes.router)
    app.include_router(secret_routes.router)
    app.include_router(migration_routes.router)

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, bool]:
        with service.read() as tx:
            tx.next_wakeup_ms()
        return {"ok": True}

    metrics.install(app, token=metrics_token, public=metrics_public)
    pages.install(app)

    if ui:
        from ..ui import mount  # noqa: PLC0415 - the UI is optional

        mount(app)

        @app.get("/", include_in_schema=False)
        def root() -> Response:
            return html.redirect("/ui/")

    return app


def _telemetry(service: Service) -> dict[str, Any]:
    """FastAPI's own OpenTelemetry support (newer FastAPI releases): one server span per request on the
    process's tracing (app/tracing), a child of the caller's `traceparent`; nothing when tracing is off,
    whatever provider the process has. Its metrics and logs stay off: lockstep's /metrics is
    Prometheus, and the logs would quote exception messages."""
    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return {}
    off: dict[str, Any] = {"metrics": False, "logs": False, "auto_configure": False}
    if service.tracing is None:
        return {"telemetry": {**off, "tracing": False}}
    return {
        "telemetry": {
            **off,
            "tracer_provider": service.tracing.tracer_provider,
            "tracing": True,
            "operation_spans": False,
        }
    }
