"""UI routes. Pages read through the same service as the API; forms POST with a CSRF token."""

from __future__ import annotations

import hmac
import json
import math
import secrets
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, FastAPI, Form, Query, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

from ..api import html
from ..app.search import Filters
from ..app.views import MigrationPlan, MigrationRequestView
from ..core.explain import WAIT_KINDS
from ..core.state import STATUSES
from ..errors import InvalidInput, LockstepError, RateLimited
from .approve import router as approve_router
from .audit import router as audit_router
from .bulk import router as bulk_router
from .definitions import router as definitions_router
from .migrations import router as migrations_router
from .pages import (
    SESSION_COOKIE,
    CsrfRejected,
    LoginRequired,
    Session,
    check_csrf,
    flash_redirect,
    page,
    principals_of,
    service_of,
)
from .reveal import router as reveal_router
from .runpage import router as runpage_router
from .schedules import router as schedules_router
from .webhooks import router as webhooks_router

__all__ = ["mount"]

HERE = Path(__file__).parent
LOGIN_CSRF_COOKIE = "lockstep_login_csrf"
router = APIRouter(prefix="/ui", include_in_schema=False)


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, next: str = "/ui/") -> HTMLResponse:
    return _login_page(request, next)


def _login_page(request: Request, next: str, status: int = 200, message: str = "") -> HTMLResponse:
    token = secrets.token_urlsafe(24)
    ctx: dict[str, Any] = {"csrf": token, "next": _safe_next(next), "me": None}
    if message:
        ctx["flash"] = message
    resp = page(request, "login.html", ctx, status)
    resp.set_cookie(
        LOGIN_CSRF_COOKIE,
        token,
        httponly=True,
        samesite="strict",
        path="/ui",
        secure=request.app.state.secure_cookies,
        max_age=3600,
    )
    return resp


def _safe_next(target: str) -> str:
    """Only local UI paths: never redirect to another site after login."""
    local = target.startswith(("/ui/", "/approve/")) and "//" not in target and "\\" not in target
    return target if local else "/ui/"


@router.post("/login")
def login(
    request: Request,
    csrf: Annotated[str, Form()] = "",
    tenant: Annotated[str, Form()] = "",
    user: Annotated[str, Form()] = "",
    password: Annotated[str, Form()] = "",
    api_key: Annotated[str, Form()] = "",
    next: Annotated[str, Form()] = "/ui/",
) -> Response:
    expected = request.cookies.get(LOGIN_CSRF_COOKIE, "")
    if not expected or not hmac.compare_digest(expected.encode(), csrf.encode()):
        return flash_redirect(
            request,
            "/ui/login?" + urlencode({"next": _safe_next(next)}),
            "Your login form expired; please try again.",
        )
    principals = principals_of(request)
    # The peer, or the client a trusted proxy named (`serve --trusted-proxy`).
    address = request.client.host if request.client else None
    p = None
    if api_key.strip():
        p = principals.authenticate_key(api_key.strip())
    elif tenant and user and password:
        try:
            p = principals.authenticate_password(tenant.strip(), user.strip(), password, address=address)
        except RateLimited as exc:  # refused before the password check, and audited
            text = str(exc)
            throttled = _login_page(request, next, 429, f"{text[:1].upper()}{text[1:]}.")
            throttled.headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after)))
            return throttled
    if p is None:
        principals.audit(tenant or None, user or None, "ui.login", None, "refused", address=address)
        return flash_redirect(
            request,
            "/ui/login?" + urlencode({"next": _safe_next(next)}),
            "Wrong tenant, user, password or key.",
        )
    principals.audit(p.tenant, p.name, "ui.login", None, "ok")
    cookie, _csrf = principals.open_session(p)
    resp = html.redirect(_safe_next(next))
    resp.set_cookie(
        SESSION_COOKIE,
        cookie,
        httponly=True,
        samesite="lax",
        path="/",
        secure=request.app.state.secure_cookies,
        max_age=12 * 3600,
    )
    resp.delete_cookie(LOGIN_CSRF_COOKIE, path="/ui")
    return resp


@router.post("/logout")
def logout(request: Request, session: Session, csrf: Annotated[str, Form()] = "") -> Response:
    check_csrf(session[1], csrf)
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie:
        principals_of(request).close_session(cookie)
    resp = html.redirect("/ui/login")
    resp.delete_cookie(SESSION_COOKIE, path="/")
    return resp


@router.get("/", response_class=HTMLResponse)
def runs_page(
    request: Request,
    session: Session,
    status: str = "",
    definition: str = "",
    waiting: str = "",
    run: str = "",
    key: str = "",
    version: str = "",
    since: str = "",
    until: str = "",
    cursor: str = "",
    input_filter: Annotated[str, Query(alias="input")] = "",
) -> Response:
    me, csrf = session
    if not me.can("read"):
        if me.can("approve"):  # an approver's work is in their inbox, not in a list they may not read
            return html.redirect("/ui/approvals")
        return page(
            request,
            "message.html",
            {
                "me": me,
                "csrf": csrf,
                "title": "Nothing to show",
                "message": "Your roles do not include reading runs.",
            },
            403,
        )
    f = Filters(status, definition, waiting, run, key, version, since, until, input_filter)
    problem = ""
    try:
        runs, next_cursor = service_of(request).find_runs(me.tenant, f, cursor, 50)
    except InvalidInput as exc:
        runs, next_cursor, problem = [], None, str(exc)
    counts: dict[str, int] = {}
    with service_of(request).read() as tx:
        for tenant, st, n in tx.stats(0)["runs"]:
            if tenant == me.tenant:
                counts[st] = n
    return page(
        request,
        "runs.html",
        {
            "me": me,
            "csrf": csrf,
            "runs": runs,
            "statuses": STATUSES,
            "wait_kinds": WAIT_KINDS,
            "counts": counts,
            "f": f,
            "problem": problem,
            "definitions": sorted({d.name for d in service_of(request).definitions(me.tenant)}),
            "next_cursor": next_cursor,
            "can_bulk": me.can("cancel") or me.can("operate"),
        },
        400 if problem else 200,
    )


@router.post("/runs/{run_id}/cancel")
def cancel(
    request: Request,
    run_id: str,
    session: Session,
    csrf: Annotated[str, Form()] = "",
    reason: Annotated[str, Form()] = "",
) -> Response:
    me, expected = session
    check_csrf(expected, csrf)
    try:
        me.require("cancel")
        out = service_of(request).cancel(me.tenant, run_id, reason, actor=me.name)
        msg = "Cancellation recorded." if out.accepted else "The run was already being cancelled."
    except LockstepError as exc:
        msg = f"Not cancelled: {exc}"
    return flash_redirect(request, f"/ui/runs/{run_id}", msg)


@router.post("/runs/{run_id}/retry")
def retry(
    request: Request,
    run_id: str,
    session: Session,
    csrf: Annotated[str, Form()] = "",
    step: Annotated[str, Form()] = "",
    reason: Annotated[str, Form()] = "",
) -> Response:
    me, expected = session
    check_csrf(expected, csrf)
    try:
        me.require("operate")
        out = service_of(request).retry(me.tenant, run_id, step, reason, actor=me.name)
        msg = f"Step {step} scheduled again (attempt {out.attempt})."
    except LockstepError as exc:
        msg = f"Not retried: {exc}"
    return flash_redirect(request, f"/ui/runs/{run_id}", msg)


@router.post("/runs/{run_id}/action")
def operator_action(
    request: Request,
    run_id: str,
    session: Session,
    csrf: Annotated[str, Form()] = "",
    action: Annotated[str, Form()] = "",
    reason: Annotated[str, Form()] = "",
    step: Annotated[str, Form()] = "",
    version: Annotated[str, Form()] = "",
    new_input: Annotated[str, Form()] = "",
) -> Response:
    """Pause, resume, skip, resolve and migrate from the run page; each needs a reason."""
    me, expected = session
    check_csrf(expected, csrf)
    repairs = service_of(request).repairs
    try:
        me.require("operate")
        if action == "pause":
            repairs.pause(me.tenant, run_id, reason, actor=me.name)
            msg = "Run paused: nothing new starts until it is resumed."
        elif action == "resume":
            repairs.resume(me.tenant, run_id, reason, actor=me.name)
            msg = "Run resumed."
        elif action == "skip":
            repairs.skip(me.tenant, run_id, step, reason, actor=me.name, roles=me.roles)
            msg = f"Step {step} skipped."
        elif action in ("resolve_succeeded", "resolve_failed"):
            outcome = action.removeprefix("resolve_")
            repairs.resolve(me.tenant, run_id, step, outcome, reason, actor=me.name)
            msg = f"Step {step} resolved as {outcome}."
        elif action == "edit_input":
            try:
                value = json.loads(new_input)
            except ValueError:
                raise InvalidInput('the new input must be JSON, e.g. {"qty": 2}') from None
            repairs.edit_input(me.tenant, run_id, value, reason, actor=me.name)
            msg = "Input replaced; steps not yet started will use it."
        elif action in ("migrate", "migrate_dry_run"):
            if not version.isdigit():
                raise InvalidInput("give the version number to migrate to")
            plan = repairs.migrate(
                me.tenant,
                run_id,
                int(version),
                reason or ("preview" if action == "migrate_dry_run" else ""),
                dry_run=action == "migrate_dry_run",
                actor=me.name,
            )
            msg = _describe_plan(plan)
        else:
            raise InvalidInput(f"unknown action {action!r}")
    except LockstepError as exc:
        msg = f"Not done: {exc}"
    return flash_redirect(request, f"/ui/runs/{run_id}", msg)


def _describe_plan(plan: MigrationPlan) -> str:
    request = plan.request if isinstance(plan.request, MigrationRequestView) else None
    if request is not None:  # `migration: requires_approval`: asked for, nothing changed yet
        return (
            f"Not migrated yet: migration request {request.request_id} (v{request.from_version} -> "
            f"v{request.to_version}) waits for the approval of {request.approvers.quorum} approver(s); "
            f"you may not decide it yourself"
        )
    head = "Dry run: " if plan.dry_run else "Migrated: "
    if plan.problems:
        return head + "refused — " + "; ".join(plan.problems)
    parts = [f"v{plan.from_.version} -> v{plan.to['version']}"]
    if plan.steps_added:
        parts.append("steps added: " + ", ".join(plan.steps_added))
    if plan.steps_removed:
        parts.append("steps removed: " + ", ".join(plan.steps_removed))
    if plan.carried:
        parts.append("carried: " + "; ".join(plan.carried))
    if plan.restart:
        parts.append(f"step {plan.restart} starts again on the new version")
    return head + "; ".join(parts)


def _page_of(path: str) -> str:
    if path.startswith("/ui/runs/") and path.endswith(("/cancel", "/retry")):
        return path.rsplit("/", 1)[0]
    return "/ui/approvals" if path.startswith(("/approve/", "/ui/approvals")) else "/ui/"


def mount(app: FastAPI) -> None:
    app.include_router(router)
    app.include_router(approve_router)
    app.include_router(reveal_router)
    app.include_router(runpage_router)
    app.include_router(definitions_router)
    app.include_router(bulk_router)
    app.include_router(audit_router)
    app.include_router(schedules_router)
    app.include_router(webhooks_router)
    app.include_router(migrations_router)
    app.mount("/ui/static", StaticFiles(directory=str(HERE / "static")), name="ui-static")

    @app.exception_handler(LoginRequired)
    async def _login(request: Request, exc: LoginRequired) -> Response:
        # After login, go back to the page; a form POST cannot be replayed as a GET, so use its page.
        target = request.url.path if request.method == "GET" else _page_of(request.url.path)
        return html.redirect("/ui/login?" + urlencode({"next": target}))

    @app.exception_handler(CsrfRejected)
    async def _csrf(request: Request, exc: CsrfRejected) -> Response:
        return page(
            request,
            "message.html",
            {"me": None, "csrf": "", "title": "Request refused", "message": str(exc)},
            403,
        )
