"""RFC 9457 problem documents: every error is JSON with a stable `type`, never a traceback."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import (
    Conflict,
    Forbidden,
    Gone,
    InvalidInput,
    LockstepError,
    NotFound,
    RateLimited,
    Refused,
    Unauthenticated,
    Unavailable,
)

__all__ = ["PROBLEM_RESPONSES", "Problem", "error_response", "install", "problem", "with_problem_schema"]

log = logging.getLogger("lockstep.api")
MEDIA = "application/problem+json"
TITLES = {
    400: "Bad request",
    401: "Unauthenticated",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    410: "Gone",
    413: "Too large",
    415: "Unsupported media type",
    422: "Invalid request",
    429: "Too many requests",
    500: "Internal error",
    503: "Unavailable",
}


class Problem(BaseModel):
    """An error (RFC 9457). `type` is stable: branch on it, not on `detail`."""

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    code: str
    refused: bool = Field(
        default=False,
        description="On a 409: true when the run's state machine refused the command (nothing was "
        "written; the CLI exits 5), absent when the request conflicted with another (the CLI exits 4)",
    )


def error_response(description: str) -> dict[str, Any]:
    """An error response in the OpenAPI document: a Problem, served as application/problem+json."""
    return {
        "description": description,
        "content": {MEDIA: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }


PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: error_response("Missing, invalid or disabled API key"),
    403: error_response("The caller's role does not allow this"),
    422: error_response("The request is malformed or fails validation"),
    503: error_response("The database is unavailable; retry after Retry-After seconds"),
}


def problem(
    status: int,
    code: str,
    detail: str,
    instance: str | None = None,
    headers: dict[str, str] | None = None,
    extra: dict[str, object] | None = None,
) -> JSONResponse:
    # Details may quote user input; never let an unencodable character turn an error into a 500.
    detail = detail.encode("utf-8", "replace").decode()
    body = {
        **(extra or {}),
        "type": f"/problems/{code.replace('_', '-')}",
        "title": TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
        "instance": instance,
        "code": code,
    }
    return JSONResponse(body, status_code=status, media_type=MEDIA, headers=headers)


def _status(exc: LockstepError) -> tuple[int, dict[str, str]]:
    if isinstance(exc, Unauthenticated):
        return 401, {"WWW-Authenticate": 'Bearer realm="lockstep"'}
    if isinstance(exc, Forbidden):
        return 403, {}
    if isinstance(exc, NotFound):
        return 404, {}
    if isinstance(exc, Gone):
        return 410, {}
    if isinstance(exc, RateLimited):
        return 429, {"Retry-After": str(max(1, round(exc.retry_after + 0.5)))}
    if isinstance(exc, Unavailable):
        return 503, {"Retry-After": "1"}
    if isinstance(exc, InvalidInput) or exc.code == "key_reused":
        return 422, {}
    if isinstance(exc, Conflict | Refused):
        return 409, {}
    return 400, {}


def _count_refusal(request: Request, status: int, code: str) -> None:
    """lockstep_refusals_total: by the caller's tenant (when the request got as far as knowing it) and
    the problem code (the package's own literals, api/codes.py; bounded again in Metrics.refused)."""
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is None:
        return
    principal = getattr(request.state, "principal", None)
    metrics.refused(getattr(principal, "tenant", None), status, code)


def _body_refused(exc: RequestValidationError) -> bool:
    """Whether validation refused the request body as a whole (no JSON object was read at all)."""
    return any(tuple(e.get("loc", ())) == ("body",) for e in exc.errors())


def install(app: FastAPI) -> None:
    @app.exception_handler(LockstepError)
    async def _lockstep(request: Request, exc: LockstepError) -> JSONResponse:
        status, headers = _status(exc)
        if status in (403, 429):
            _count_refusal(request, status, exc.code)
        extra = {**(exc.extra or {}), "refused": True} if isinstance(exc, Refused) else exc.extra
        return problem(status, exc.code, str(exc), request.url.path, headers, extra)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media and media != "application/json" and not media.endswith("+json") and _body_refused(exc):
            # `curl -d '{...}'` sends application/x-www-form-urlencoded: FastAPI then reads no JSON and
            # says "Input should be a valid dictionary", which hides the one thing to fix.
            return problem(
                415,
                "unsupported_media_type",
                f"the request body must be JSON, sent with Content-Type: application/json (this request "
                f"said {media}; with curl add -H 'Content-Type: application/json')",
                request.url.path,
            )
        parts = []
        for e in exc.errors()[:5]:
            where = ".".join(str(x) for x in e.get("loc", ()))
            parts.append(f"{where}: {e.get('msg')}")
        return problem(422, "invalid_request", "; ".join(parts) or "invalid request", request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:  # an unreadable body (e.g. not UTF-8): the same answer as bad JSON
            return problem(
                422, "invalid_request", f"the request body cannot be read: {exc.detail}", request.url.path
            )
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return problem(
            exc.status_code,
            code,
            str(exc.detail),
            request.url.path,
            dict(exc.headers) if exc.headers else None,
        )

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem(500, "internal", "an internal error occurred; it was logged", request.url.path)


def with_problem_schema(app: FastAPI) -> None:
    """Register the Problem schema that every error response of the OpenAPI document refers to."""
    original = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = original()
            doc.setdefault("components", {}).setdefault("schemas", {})["Problem"] = (
                Problem.model_json_schema()
            )
            _body_errors(doc)
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _body_errors(doc: dict[str, Any]) -> None:
    """The refusals of a request body that come before any route (api/limits.py and the validation
    handler above), on every operation that takes one: 413 over max_request_bytes, and, for a JSON-only
    body, 415 when it was sent as another media type."""
    for item in doc.get("paths", {}).values():
        for op in item.values():
            body = op.get("requestBody")
            if not isinstance(body, dict):
                continue
            responses = op.setdefault("responses", {})
            responses.setdefault(
                "413", error_response("The body is over the server's max_request_bytes (`too_large`)")
            )
            if set(body.get("content", {})) == {"application/json"}:
                responses.setdefault(
                    "415",
                    error_response(
                        "The body was not sent as `Content-Type: application/json` (`unsupported_media_type`)"
                    ),
                )
