"""Retention over HTTP: a purged run answers 410 Gone with its tombstone (never 404, and never to another
tenant, which gets 404); listings leave it out; GET /v1/retention is the caller's tenant's, for admins
and operators only; nothing over HTTP sets a retention, places or releases a hold or purges a run."""

from __future__ import annotations

import re

import httpx
import pytest

from lockstep.engine import Engine

from .conftest import NAP, Api, FakeClock, Tenant, assert_problem

pytestmark = pytest.mark.anyio

QUICK = {"name": "quick", "steps": [{"id": "nap", "wait": "1s"}]}


@pytest.fixture
async def purged(api: Api, engine: Engine, clock: FakeClock, acme: Tenant) -> tuple[str, str]:
    """(a purged run, a kept run) of acme, whose retention is 1 day."""
    for doc in (QUICK, NAP):
        assert (await api.publish(doc)).status_code == 201
    gone = await api.start_ok("quick")
    kept = await api.start_ok("nap")
    clock.advance(seconds=1)
    engine.service.fire_due_timers()
    engine.service.principals.set_tenant("acme", retention=86400)
    clock.advance(days=2)
    assert engine.service.retention.purge.run_pass().tombstoned == 1
    return gone, kept


async def test_a_purged_run_is_410_with_when_by_whom_and_why(api: Api, purged: tuple[str, str]):
    """GET, events, cancel, verify and the approval links and reassignment of a purged run: 410 problem
    `purged` with the tombstone's facts."""
    gone, _ = purged
    auth = api.t.auth("operator")
    for r in (
        await api.c.get(f"/v1/runs/{gone}", headers=auth),
        await api.c.get(f"/v1/runs/{gone}/events", headers=auth),
        await api.c.get(f"/v1/runs/{gone}/verify", headers=auth),
        await api.c.post(f"/v1/runs/{gone}/cancel", json={"reason": "late"}, headers=auth),
        await api.c.post(f"/v1/runs/{gone}/approvals/nap/links", json={"approver": "x"}, headers=auth),
        await api.c.get(f"/v1/runs/{gone}/approvals/links", headers=auth),
        await api.c.post(
            f"/v1/runs/{gone}/approvals/nap/reassign",
            json={"old": "a", "new": "b", "reason": "away"},
            headers=auth,
        ),
    ):
        body = assert_problem(r, 410, "purged")
        assert body["purged_by"] == "retention"
        assert body["reason"] == "finished more than 1d ago (tenant retention 1d)"
        assert body["run_status"] == "completed"
        assert "was purged at" in body["detail"]
    page = await api.c.get("/problems/purged")
    assert page.status_code == 200


async def test_another_tenant_gets_404_for_a_purged_run_as_for_any_run(other: Api, purged: tuple[str, str]):
    """A tombstone does not reveal that another tenant's run existed."""
    gone, kept = purged
    for run_id in (gone, kept):
        r = await other.c.get(f"/v1/runs/{run_id}", headers=other.t.auth("admin"))
        assert_problem(r, 404, "not_found")
    r = await other.c.get("/v1/retention/tombstones", headers=other.t.auth("admin"))
    assert r.status_code == 200
    assert r.json() == []


async def test_listings_leave_purged_runs_out(api: Api, purged: tuple[str, str]):
    """GET /v1/runs lists the kept run only."""
    _gone, kept = purged
    r = await api.list_runs()
    assert [x["run_id"] for x in r.json()["items"]] == [kept]


async def test_retention_status_is_the_callers_tenant_for_admins_and_operators(
    api: Api, other: Api, purged: tuple[str, str]
):
    """Admins and operators read their tenant's retention and tombstones; other roles get 403."""
    gone, _ = purged
    for role in ("admin", "operator"):
        r = await api.c.get("/v1/retention", headers=api.t.auth(role))
        assert r.status_code == 200, r.text
        body = r.json()
        assert (body["tenant"], body["retention"], body["tombstones"]["purged"]) == ("acme", "1d", 1)
        stones = await api.c.get("/v1/retention/tombstones", headers=api.t.auth(role))
        assert [t["run_id"] for t in stones.json()] == [gone]
    for role in ("viewer", "approver", "worker"):
        assert_problem(await api.c.get("/v1/retention", headers=api.t.auth(role)), 403)
    assert_problem(await api.c.get("/v1/retention"), 401)
    mine = await other.c.get("/v1/retention", headers=other.t.auth("admin"))
    assert (mine.json()["tenant"], mine.json()["retention"]) == ("globex", None)


async def test_nothing_over_http_sets_retention_holds_or_purges(
    api: Api, purged: tuple[str, str], engine: Engine
):
    """The attack: a tenant admin tries to shorten, hold, release or purge over the API; no such route
    exists, and nothing changes."""
    _, kept = purged
    admin = api.t.auth("admin")
    attempts = [
        ("PUT", "/v1/retention", {"retention": 1}),
        ("POST", "/v1/retention", {"retention": 1}),
        ("PATCH", "/v1/retention", {"retention": 1}),
        ("POST", "/v1/retention/purge", {}),
        ("POST", f"/v1/runs/{kept}/hold", {"reason": "x"}),
        ("POST", f"/v1/runs/{kept}/release", {"reason": "x"}),
        ("POST", f"/v1/runs/{kept}/purge", {"reason": "x"}),
        ("DELETE", f"/v1/runs/{kept}", None),
    ]
    for method, path, body in attempts:
        r = await api.c.request(method, path, json=body, headers=admin)
        assert r.status_code in (404, 405), (method, path, r.status_code)
    status = engine.service.retention.status("acme").tenants[0]
    assert (status.retention_seconds, status.held_runs) == (86400, 0)
    assert (await api.run(kept))["status"] == "waiting"


async def test_the_ui_shows_a_purged_run_as_gone(
    client: httpx.AsyncClient, api: Api, engine: Engine, purged: tuple[str, str]
):
    """The run page of a purged run is a 410 page saying when and why (not a 404 or a 500)."""
    gone, _ = purged
    form = await client.get("/ui/login")
    token = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert token, form.text
    data = {
        "csrf": token.group(1),
        "tenant": "acme",
        "user": "",
        "password": "",
        "api_key": api.t.keys["viewer"],
    }
    assert (await client.post("/ui/login", data=data)).status_code == 303
    page = await client.get(f"/ui/runs/{gone}")
    assert page.status_code == 410
    assert "Run purged" in page.text
    assert "tenant retention 1d" in page.text
