"""Fixtures for the HTTP API tests: one SQLite database per test, a fake clock, two tenants with a user
per role, and an in-process httpx client over the ASGI app (no server, no sockets)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fastapi import FastAPI

from lockstep.api.app import create_app
from lockstep.app.principals import ROLES, Principals
from lockstep.engine import Engine

T0 = datetime(2025, 1, 1, tzinfo=UTC)
PROBLEM = "application/problem+json"
ORDER_YAML = resources.files("lockstep.examples").joinpath("order-fulfilment.yaml").read_text()
ORDER_DOC: dict[str, Any] = yaml.safe_load(ORDER_YAML)
# The steps of order-fulfilment, and an input that passes its input_schema.
ORDER = "order-fulfilment"
NAP: dict[str, Any] = {"name": "nap", "steps": [{"id": "nap", "wait": "1h"}]}


def order_input(n: int = 1, **extra: Any) -> dict[str, Any]:
    return {"order_id": f"o-{n}", "sku": "widget", "qty": 1, "amount": 9.5, **extra}


class FakeClock:
    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> datetime:
        self.now += timedelta(**kwargs)
        return self.now


@dataclass
class Tenant:
    """A tenant and the API key of one user per role (user name = role name)."""

    name: str
    keys: dict[str, str]

    def auth(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[role]}"}


class Db:
    """Raw read-only SQL on the test's database, to check what was (not) written."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def count(self, table: str, where: str = "1=1", *params: Any) -> int:
        conn = sqlite3.connect(self.path, timeout=10)
        try:
            return int(conn.execute(f"SELECT COUNT(*) FROM {table} WHERE {where}", params).fetchone()[0])
        finally:
            conn.close()

    def totals(self) -> dict[str, int]:
        return {t: self.count(t) for t in ("runs", "events", "tasks", "timers")}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "db.sqlite"


@pytest.fixture
def engine(db_path: Path, clock: FakeClock, request: pytest.FixtureRequest) -> Iterator[Engine]:
    """The engine; parametrize it indirectly with a dict to override server-wide limits."""
    e = Engine.open(f"sqlite:///{db_path}", clock=clock, server_limits=getattr(request, "param", None))
    try:
        yield e
    finally:
        e.close()


@pytest.fixture
def db(db_path: Path, engine: Engine) -> Db:
    return Db(db_path)


@pytest.fixture
def principals(engine: Engine) -> Principals:
    return engine.service.principals


def make_tenant(principals: Principals, name: str) -> Tenant:
    principals.create_tenant(name)
    keys = {role: principals.create_user(name, role, [role], []).api_key for role in ROLES}
    return Tenant(name, keys)


@pytest.fixture
def acme(principals: Principals) -> Tenant:
    return make_tenant(principals, "acme")


@pytest.fixture
def globex(principals: Principals) -> Tenant:
    return make_tenant(principals, "globex")


@pytest.fixture
def app(engine: Engine) -> FastAPI:
    return create_app(engine.service)


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        yield c


def assert_problem(r: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    """An RFC 9457 problem document with the given status and a stable `type` derived from `code`."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith(PROBLEM), r.headers
    body: dict[str, Any] = r.json()
    assert {"type", "title", "status", "detail", "code"} <= set(body), body
    assert body["status"] == status
    assert body["type"] == f"/problems/{body['code'].replace('_', '-')}"
    assert body["title"]
    assert body["detail"]
    if code is not None:
        assert body["code"] == code, body
    return body


class Api:
    """Small helpers over the client for one tenant, so tests read as the scenario they pin."""

    def __init__(self, client: httpx.AsyncClient, tenant: Tenant) -> None:
        self.c = client
        self.t = tenant

    async def publish(self, doc: dict[str, Any] | str = ORDER_YAML, role: str = "admin") -> httpx.Response:
        if isinstance(doc, str):
            return await self.c.post(
                "/v1/definitions",
                content=doc.encode(),
                headers={**self.t.auth(role), "content-type": "application/yaml"},
            )
        return await self.c.post("/v1/definitions", json=doc, headers=self.t.auth(role))

    async def start(
        self,
        definition: str = ORDER,
        input: Any = None,
        *,
        key: str | None = None,
        role: str = "operator",
        version: int | None = None,
    ) -> httpx.Response:
        body: dict[str, Any] = {"definition": definition}
        if input is not None:
            body["input"] = input
        if version is not None:
            body["version"] = version
        headers = self.t.auth(role)
        if key is not None:
            headers["Idempotency-Key"] = key
        return await self.c.post("/v1/runs", json=body, headers=headers)

    async def start_ok(self, definition: str = ORDER, input: Any = None, **kw: Any) -> str:
        if input is None and definition == ORDER:
            input = order_input()
        r = await self.start(definition, input, **kw)
        assert r.status_code == 201, r.text
        return str(r.json()["run_id"])

    async def run(self, run_id: str, role: str = "viewer") -> dict[str, Any]:
        r = await self.c.get(f"/v1/runs/{run_id}", headers=self.t.auth(role))
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
        return out

    async def events(self, run_id: str) -> list[dict[str, Any]]:
        r = await self.c.get(f"/v1/runs/{run_id}/events", headers=self.t.auth("viewer"))
        assert r.status_code == 200, r.text
        assert r.json()["next_cursor"] is None, "a test's run has fewer events than a page"
        out: list[dict[str, Any]] = r.json()["items"]
        return out

    async def list_runs(self, **params: Any) -> httpx.Response:
        return await self.c.get("/v1/runs", params=params, headers=self.t.auth("viewer"))

    async def poll(self, *activities: str, role: str = "worker", **kw: Any) -> list[dict[str, Any]]:
        body = {"activities": list(activities), "wait_seconds": 0, **kw}
        r = await self.c.post("/v1/tasks/poll", json=body, headers=self.t.auth(role))
        assert r.status_code == 200, r.text
        out: list[dict[str, Any]] = r.json()["tasks"]
        return out

    async def report(
        self, task: dict[str, Any], verb: str = "complete", role: str = "worker", **body: Any
    ) -> httpx.Response:
        payload = {"attempt": task["attempt"], "fencing_token": task["fencing_token"], **body}
        if verb == "complete":
            payload.setdefault("output", {"ok": True})
        if verb == "fail":
            payload.setdefault("error", {"code": "Boom", "message": "it broke"})
        if verb == "heartbeat":
            payload = {"fencing_token": body.get("fencing_token", task["fencing_token"])}
        return await self.c.post(
            f"/v1/tasks/{task['task_id']}/{verb}", json=payload, headers=self.t.auth(role)
        )


@pytest.fixture
def api(client: httpx.AsyncClient, acme: Tenant) -> Api:
    return Api(client, acme)


@pytest.fixture
def other(client: httpx.AsyncClient, globex: Tenant) -> Api:
    return Api(client, globex)
