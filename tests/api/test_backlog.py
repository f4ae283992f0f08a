"""Backpressure: once the activity tasks waiting for a worker reach max_tenant_backlog (the tenant's) or
max_backlog (all tenants'), starts answer 429 backlog_full with Retry-After and write nothing; a tenant
that fills its own backlog refuses only its own starts; when workers take tasks, starts are accepted
again; the Python client waits out Retry-After by itself. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from lockstep.api.app import create_app
from lockstep.client.aio import AsyncClient
from lockstep.engine import Engine
from lockstep.errors import RateLimited
from lockstep.store.sqltx.work import SqlWorkTx

from .conftest import Tenant, assert_problem, make_tenant

JOB = {"name": "job", "steps": [{"id": "do", "activity": "job.do", "timeout": "1m"}]}
pytestmark = pytest.mark.anyio

LIMITS = {"max_tenant_backlog": 3, "max_backlog": 5, "backlog_refresh_ms": 1}


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    url = f"sqlite:///{tmp_path}/db.sqlite"
    if request.param == "postgresql":
        url = str(request.getfixturevalue("pg_url"))
    e = Engine.open(url, server_limits=LIMITS)
    try:
        yield e
    finally:
        e.close()


@pytest.fixture
def tenants(engine: Engine) -> dict[str, Tenant]:
    made = {name: make_tenant(engine.service.principals, name) for name in ("acme", "globex")}
    for name in made:
        engine.publish(JOB, tenant=name)
    return made


@pytest.fixture
async def http(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(engine.service))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        yield c


async def start(http: httpx.AsyncClient, tenant: Tenant) -> httpx.Response:
    return await http.post("/v1/runs", json={"definition": "job"}, headers=tenant.auth("operator"))


def take(engine: Engine, tenant: str, n: int) -> int:
    """A worker leases `n` of the tenant's ready tasks (they leave the backlog)."""
    return len(engine.service.claim("w1", ["job.do"], limit=n, lease_ttl=timedelta(minutes=1), tenant=tenant))


def runs(engine: Engine, tenant: str) -> int:
    with engine.service.read() as tx:
        return len(tx.runs(tenant, status=None, definition=None, after="", limit=1000))


async def test_a_full_backlog_refuses_starts_with_retry_after_and_writes_nothing(
    engine: Engine, tenants: dict[str, Tenant], http: httpx.AsyncClient
) -> None:
    """The tenant's 4th start over max_tenant_backlog=3 is 429 backlog_full, Retry-After >= 1, no run."""
    acme = tenants["acme"]
    for _ in range(3):
        assert (await start(http, acme)).status_code == 201
    r = await start(http, acme)
    body = assert_problem(r, 429, "backlog_full")
    assert "max_tenant_backlog=3" in body["detail"]
    assert int(r.headers["Retry-After"]) >= 1
    assert runs(engine, "acme") == 3


async def test_a_tenant_flooding_its_backlog_leaves_room_for_the_others(
    engine: Engine, tenants: dict[str, Tenant], http: httpx.AsyncClient
) -> None:
    """Attack: acme starts as fast as it can; it is refused at its share while globex still starts,
    until the server-wide max_backlog (5) is reached."""
    acme, globex = tenants["acme"], tenants["globex"]
    codes = [(await start(http, acme)).status_code for _ in range(20)]
    assert codes.count(201) == 3
    assert codes.count(429) == 17
    assert (await start(http, globex)).status_code == 201
    assert (await start(http, globex)).status_code == 201
    assert_problem(await start(http, globex), 429, "backlog_full")  # 5 of all tenants: max_backlog
    assert (runs(engine, "acme"), runs(engine, "globex")) == (3, 2)


async def test_starts_are_accepted_again_once_workers_take_tasks(
    engine: Engine, tenants: dict[str, Tenant], http: httpx.AsyncClient
) -> None:
    """The backlog drains (a worker leases two tasks): two more starts pass, the next is refused."""
    acme = tenants["acme"]
    for _ in range(3):
        await start(http, acme)
    assert (await start(http, acme)).status_code == 429
    assert take(engine, "acme", 2) == 2
    assert [(await start(http, acme)).status_code for _ in range(3)] == [201, 201, 429]


async def test_the_python_client_waits_out_retry_after(
    engine: Engine, tenants: dict[str, Tenant], http: httpx.AsyncClient
) -> None:
    """A start into a full backlog returns once a worker took a task (the client retried after
    Retry-After); with busy_wait=0 it raises RateLimited at once."""
    acme = tenants["acme"]
    for _ in range(3):
        await start(http, acme)
    transport = httpx.ASGITransport(app=create_app(engine.service))
    async with AsyncClient("http://127.0.0.1", api_key=acme.keys["operator"], transport=transport) as client:
        async with AsyncClient(
            "http://127.0.0.1", api_key=acme.keys["operator"], transport=transport, busy_wait=0
        ) as impatient:
            with pytest.raises(RateLimited) as info:
                await impatient.start("job")
            assert info.value.code == "backlog_full"
            assert info.value.retry_after >= 1
        pending = asyncio.ensure_future(client.start("job"))
        await asyncio.sleep(0.3)
        assert not pending.done()  # waiting out Retry-After
        await asyncio.to_thread(take, engine, "acme", 1)
        result = await asyncio.wait_for(pending, 10)
    assert result.created
    assert runs(engine, "acme") == 4


def test_a_start_costs_no_count_between_refreshes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With backlog_refresh_ms=60000, 30 starts count the ready tasks once, and the starts this process
    admitted since still hold the tenant at its bound (the 11th start over 10 is refused)."""
    calls: list[int] = []
    real = SqlWorkTx.ready_backlog

    def counted(self: SqlWorkTx) -> dict[str, int]:
        calls.append(1)
        return real(self)

    monkeypatch.setattr(SqlWorkTx, "ready_backlog", counted)
    limits = {"max_tenant_backlog": 10, "backlog_refresh_ms": 60_000}
    with Engine.open(f"sqlite:///{tmp_path}/db.sqlite", server_limits=limits) as engine:
        engine.publish(JOB)
        outcomes = []
        for _ in range(30):
            try:
                engine.start("job")
                outcomes.append("ok")
            except RateLimited as exc:
                outcomes.append(exc.code or "")
    assert outcomes == ["ok"] * 10 + ["backlog_full"] * 20
    assert len(calls) == 1
