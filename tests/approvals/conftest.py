"""Fixtures for the approval tests: one SQLite file per test, a fake clock, a tenant with approvers in
groups, and synchronous calls into the ASGI app over httpx.ASGITransport (no server, no sockets).

The HTTP client runs on an anyio blocking portal, so several threads can call the app at the same
time (each request's sync endpoint runs in its own worker thread): that is how the double-click test
races two decisions for real.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import sqlite3
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from fastapi import FastAPI

from lockstep.api.app import create_app
from lockstep.app.approvals import Approvals
from lockstep.app.principals import Principal, Principals
from lockstep.engine import Engine

T0 = datetime(2025, 1, 1, tzinfo=UTC)
TENANT = "acme"
STEP = "manager-approval"
PROBLEM = "application/problem+json"
PASSWORD = "correct-horse-battery"  # noqa: S105 - a test user's password

# (user, roles, groups) of tenant acme. alice and bob are named in the policy; carol and dave reach it
# through the group finance; erin is an approver nobody named (a reassignment target); frank is in
# finance but is not an approver; op/admin/viewer/worker hold one non-approver role each.
USERS: list[tuple[str, list[str], list[str]]] = [
    ("alice", ["approver"], ["managers"]),
    ("bob", ["approver"], ["managers"]),
    ("carol", ["approver", "viewer"], ["finance"]),
    ("dave", ["approver"], ["finance"]),
    ("erin", ["approver"], []),
    ("frank", ["viewer"], ["finance"]),
    ("op", ["operator"], []),
    ("admin", ["admin"], []),
    ("viewer", ["viewer"], []),
]


def approval_step(**policy: Any) -> dict[str, Any]:
    """The purchase-order approval step, with policy fields overridden by keyword."""
    spec: dict[str, Any] = {
        "approvers": {"users": ["alice", "bob"], "groups": ["finance"]},
        "quorum": 2,
        "timeout": "3d",
        "on_timeout": "reject",
        "on_reject": "fail",
        "details": "Approve PO ${input.po} for ${input.amount} EUR",
    }
    spec.update(policy)
    return {"id": STEP, "approval": spec}


def po_definition(
    name: str = "po", *, extra_steps: list[dict[str, Any]] | None = None, **policy: Any
) -> dict[str, Any]:
    """Approval, then pay the supplier (an activity), plus optional steps reachable only by name."""
    return {
        "name": name,
        "input_schema": {"type": "object", "required": ["po", "amount"]},
        "steps": [
            approval_step(**policy),
            {
                "id": "pay",
                "activity": "payments.charge",
                "input": {"po": "${input.po}"},
                "timeout": "30s",
                "next": "end",
            },
            *(extra_steps or []),
        ],
    }


# Reachable only through on_reject / on_timeout: a step that records how the approval ended.
ESCALATE = {"id": "escalate", "wait": "1h", "next": "end"}


class Capture:
    """A notification channel that keeps the messages it is given (raw tokens included)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def send(self, message: dict[str, Any]) -> None:
        self.messages.append(message)


class FakeClock:
    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> datetime:
        self.now += timedelta(**kwargs)
        return self.now


class Http:
    """Blocking calls into the app; safe to use from several threads at once."""

    def __init__(self, portal: BlockingPortal, client: httpx.AsyncClient) -> None:
        self.portal = portal
        self.client = client

    def request(self, method: str, url: str, *, key: str | None = None, **kw: Any) -> httpx.Response:
        headers = dict(kw.pop("headers", {}) or {})
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        call = functools.partial(self.client.request, method, url, headers=headers, **kw)
        return self.portal.call(call)

    def get(self, url: str, **kw: Any) -> httpx.Response:
        return self.request("GET", url, **kw)

    def post(self, url: str, **kw: Any) -> httpx.Response:
        return self.request("POST", url, **kw)


def open_http(app: FastAPI, stack: ExitStack) -> Http:
    portal = stack.enter_context(start_blocking_portal())
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
    stack.callback(portal.call, client.aclose)
    return Http(portal, client)


@dataclass
class World:
    """Everything one approval test needs, with helpers that read as the scenario."""

    engine: Engine
    clock: FakeClock
    db_path: Path
    principals: Principals
    approvals: Approvals
    keys: dict[str, str]
    http: Http
    app: FastAPI
    stack: ExitStack
    minted: list[str] = field(default_factory=list)  # every raw token seen by the test

    @property
    def service(self) -> Any:
        return self.engine.service

    # --- setup ---------------------------------------------------------------------------------
    def publish(self, doc: dict[str, Any]) -> None:
        self.engine.publish(doc, tenant=TENANT)

    def start(
        self, name: str = "po", *, actor: str | None = "op", po: str = "PO-1", amount: float = 1250.0
    ) -> str:
        return self.engine.start(name, input={"po": po, "amount": amount}, tenant=TENANT, actor=actor)

    def principal(self, name: str) -> Principal:
        p = self.principals.principal(TENANT, name)
        assert p is not None, name
        return p

    # --- links and decisions -------------------------------------------------------------------
    def mint_response(self, run_id: str, approver: str, *, step: str = STEP, **body: Any) -> httpx.Response:
        r = self.http.post(
            f"/v1/runs/{run_id}/approvals/{step}/links",
            json={"approver": approver, **body},
            key=self.keys["op"],
        )
        if r.status_code == 201:
            self.minted.append(r.json()["token"])
        return r

    def mint(self, run_id: str, approver: str, **kw: Any) -> dict[str, Any]:
        """A fresh link for `approver`, minted by an operator through the API."""
        r = self.mint_response(run_id, approver, **kw)
        assert r.status_code == 201, r.text
        out: dict[str, Any] = r.json()
        return out

    def decide(
        self, token: str, user: str, decision: str = "approve", comment: str | None = None
    ) -> httpx.Response:
        body: dict[str, Any] = {"token": token, "decision": decision}
        if comment is not None:
            body["comment"] = comment
        return self.http.post("/v1/approvals/decide", json=body, key=self.keys[user])

    def ui(self, user: str) -> tuple[Http, str]:
        """A UI session for `user` (password login through the login form); returns (client, CSRF token)."""
        self.principals.set_password(TENANT, user, PASSWORD)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://test")
        self.stack.callback(self.http.portal.call, client.aclose)
        ui = Http(self.http.portal, client)
        form = ui.get("/ui/login")
        login_csrf = csrf_of(form.text)
        r = ui.post(
            "/ui/login",
            data={
                "csrf": login_csrf,
                "tenant": TENANT,
                "user": user,
                "password": PASSWORD,
                "next": "/ui/approvals",
            },
        )
        assert r.status_code == 303, r.text
        assert r.headers["location"] == "/ui/approvals"
        page = ui.get("/ui/approvals")
        assert page.status_code == 200, page.text
        return ui, csrf_of(page.text)

    # --- reading back ----------------------------------------------------------------------------
    def show(self, run_id: str) -> dict[str, Any]:
        return self.engine.show(run_id, tenant=TENANT)

    def events(self, run_id: str) -> list[dict[str, Any]]:
        return self.engine.events(run_id, tenant=TENANT)

    def types(self, run_id: str) -> list[str]:
        return [e["type"] for e in self.events(run_id)]

    def decisions(self, run_id: str, approver: str | None = None) -> list[dict[str, Any]]:
        return [
            e["data"]
            for e in self.events(run_id)
            if e["type"] == "ApprovalDecisionRecorded" and approver in (None, e["data"]["approver"])
        ]

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        """Raw SQL on the database file, outside the engine (read-only use)."""
        conn = sqlite3.connect(self.db_path, timeout=10)
        try:
            return list(conn.execute(query, params).fetchall())
        finally:
            conn.close()

    def link_status(self, link_id: str) -> str:
        rows = self.sql("SELECT status FROM approval_links WHERE link_id = ?", link_id)
        assert rows, link_id
        return str(rows[0][0])

    def audit(self, action: str = "approval.decide") -> list[dict[str, Any]]:
        rows = self.sql(
            "SELECT id, at, tenant, actor, action, target, outcome, detail FROM audit "
            "WHERE action = ? ORDER BY id",
            action,
        )
        cols = ("id", "at", "tenant", "actor", "action", "target", "outcome", "detail")
        return [{**dict(zip(cols, r, strict=True)), "detail": json.loads(r[7])} for r in rows]

    def totals(self) -> dict[str, int]:
        """Row counts of every table a decision could write to (a refused attempt changes none)."""
        tables = ("events", "approval_decisions", "timers", "tasks", "notifications")
        counts = {t: int(self.sql(f"SELECT COUNT(*) FROM {t}")[0][0]) for t in tables}
        for status in ("pending", "used", "revoked"):
            counts[f"links_{status}"] = int(
                self.sql("SELECT COUNT(*) FROM approval_links WHERE status = ?", status)[0][0]
            )
        return counts


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html
    return found.group(1)


def db_bytes(path: Path) -> bytes:
    """Everything SQLite keeps on disk for `path`, after folding the WAL into the main file."""
    conn = sqlite3.connect(path, timeout=10)
    try:
        busy, _log, _done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0, "the checkpoint could not run to completion"
    finally:
        conn.close()
    out = path.read_bytes()
    for suffix in ("-wal", "-shm", "-journal"):
        extra = path.with_name(path.name + suffix)
        if extra.exists():
            out += extra.read_bytes()
    return out


def assert_no_tokens_in(blob: bytes, tokens: list[str]) -> None:
    """No raw token in `blob`: not as text, not as its 32 decoded bytes; its sha256 is what is stored."""
    assert tokens
    for token in tokens:
        assert token.encode() not in blob, f"raw token {token[:6]}... is stored"
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        assert raw not in blob, f"decoded token {token[:6]}... is stored"


def assert_problem(r: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    """An RFC 9457 problem document with this status (and stable code)."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith(PROBLEM), r.headers
    body: dict[str, Any] = r.json()
    assert body["status"] == status
    assert body["type"] == f"/problems/{body['code'].replace('_', '-')}"
    if code is not None:
        assert body["code"] == code, body
    return body


def open_world(
    db_path: Path,
    clock: FakeClock,
    stack: ExitStack,
    keys: dict[str, str] | None = None,
    server_limits: dict[str, int] | None = None,
) -> World:
    """Open an engine (with `server_limits` overridden) and the app on `db_path`; without `keys`,
    create tenant acme and USERS first."""
    engine = Engine.open(f"sqlite:///{db_path}", clock=clock, server_limits=server_limits)
    stack.callback(engine.close)
    principals = engine.service.principals
    if keys is None:
        principals.create_tenant(TENANT)
        keys = {
            name: principals.create_user(TENANT, name, roles, groups).api_key for name, roles, groups in USERS
        }
    app = create_app(engine.service, public_url="http://test")
    http = open_http(app, stack)
    return World(engine, clock, db_path, app.state.principals, app.state.approvals, keys, http, app, stack)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def world(tmp_path: Path, clock: FakeClock) -> Iterator[World]:
    """Tenant acme with USERS, the `po` definition published, and an in-process API client."""
    with ExitStack() as stack:
        w = open_world(tmp_path / "db.sqlite", clock, stack)
        w.publish(po_definition())
        yield w
        # Whatever a test did, every run's snapshot still equals the replay of its events.
        bad = [v for v in w.service.verify() if not v.ok]
        assert not bad, bad
