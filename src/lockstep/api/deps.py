"""Request-scoped dependencies: the service, and the authenticated principal with a permission check."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..app.principals import Principal, Principals
from ..app.service import Service
from ..errors import LockstepError, Unauthenticated

__all__ = ["Svc", "audited", "get_principals", "get_service", "need", "on_loop"]

T = TypeVar("T")

_bearer = HTTPBearer(auto_error=False, description="An API key from `lockstep users create`")


def get_service(request: Request) -> Service:
    svc: Service = request.app.state.service
    return svc


def get_principals(request: Request) -> Principals:
    p: Principals = request.app.state.principals
    return p


def on_loop(read: Callable[[Request], T]) -> Callable[[Request], Awaitable[T]]:
    """`read` (which only reads app.state) as an async dependency: FastAPI runs a sync dependency in a
    worker thread, a thread hop (0.2 ms and more on a busy server) on every request for nothing."""

    async def dep(request: Request) -> T:
        return read(request)

    return dep


Svc = Annotated[Service, Depends(on_loop(get_service))]


def _principal(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    if creds is None or creds.scheme.lower() != "bearer":
        raise Unauthenticated("missing credentials: send `Authorization: Bearer <API key>`")
    p = get_principals(request).authenticate_key(creds.credentials)
    if p is None:
        raise Unauthenticated("invalid or disabled API key")
    request.state.principal = p
    return p


def audited(permission: str, action: str) -> Callable[..., Principal]:
    """Like need(), but a refused caller (no key, bad key, wrong role) is written to the audit log."""

    def dep(
        request: Request, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
    ) -> Principal:
        try:
            p = _principal(request, creds)
            p.require(permission)
        except LockstepError as exc:
            known = getattr(request.state, "principal", None)
            get_principals(request).audit(
                known.tenant if known else None,
                known.name if known else None,
                action,
                None,
                "refused",
                code=exc.code,
            )
            raise
        return p

    return dep


def need(permission: str) -> Callable[..., Principal]:
    """A dependency: the caller, who must hold `permission` in their own tenant. A refusal is audited as
    `api.request` (target: the route) when someone tried: an API key that matches nobody (401; a
    request without credentials is not an attempt) or a user whose roles lack the permission (403)."""

    def dep(
        request: Request, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
    ) -> Principal:
        try:
            p = _principal(request, creds)
        except Unauthenticated as exc:
            if creds is not None:
                _refused(request, None, None, exc.code, credentials="unknown API key")
            raise
        if not p.can(permission):
            _refused(request, p.tenant, p.name, "forbidden", permission=permission)
            p.require(permission)
        return p

    return dep


def _refused(request: Request, tenant: str | None, actor: str | None, code: str, **detail: str) -> None:
    route = request.scope.get("route")
    target = f"{request.method} {getattr(route, 'path', request.url.path)}"
    get_principals(request).audit(tenant, actor, "api.request", target[:200], "refused", code=code, **detail)
