"""Tenant isolation: a second tenant's key sees nothing of the first, and a foreign id is a 404 (never a
403 that would confirm it exists), for runs, events, cancel, tasks and definitions."""

from __future__ import annotations

import pytest

from .conftest import ORDER, Api, Db, assert_problem, order_input

pytestmark = pytest.mark.anyio


@pytest.fixture
async def acme_run(api: Api) -> str:
    assert (await api.publish()).status_code == 201
    return await api.start_ok()


async def test_list_runs_shows_nothing_of_another_tenant(api: Api, other: Api, acme_run: str):
    """globex's run list is empty, whatever filter it uses, while acme's lists its run."""
    assert [r["run_id"] for r in (await api.list_runs()).json()["items"]] == [acme_run]
    for params in (
        {},
        {"status": "running"},
        {"definition": ORDER},
        {"waiting": "queued"},
        {"cursor": "f" * 32},
    ):
        r = await other.list_runs(**params)
        assert r.status_code == 200
        assert r.json() == {"items": [], "next_cursor": None}


async def test_get_and_events_of_a_foreign_run_are_404_like_a_missing_one(
    api: Api, other: Api, acme_run: str
):
    """GET a run and its events with another tenant's key: 404, with the same answer as for an unknown id."""
    missing = "f" * len(acme_run)
    for suffix in ("", "/events"):
        foreign = assert_problem(
            await other.c.get(f"/v1/runs/{acme_run}{suffix}", headers=other.t.auth("admin")), 404, "not_found"
        )
        unknown = assert_problem(
            await other.c.get(f"/v1/runs/{missing}{suffix}", headers=other.t.auth("admin")), 404, "not_found"
        )
        assert foreign["detail"].replace(acme_run, "ID") == unknown["detail"].replace(missing, "ID")
        assert "acme" not in foreign["detail"]


async def test_cancel_of_a_foreign_run_is_404_and_changes_nothing(
    api: Api, other: Api, acme_run: str, db: Db
):
    """globex's admin cancelling acme's run gets 404; the run keeps running and no event is appended."""
    before = await api.events(acme_run)
    totals = db.totals()
    r = await other.c.post(
        f"/v1/runs/{acme_run}/cancel", json={"reason": "hostile"}, headers=other.t.auth("admin")
    )
    assert_problem(r, 404, "not_found")
    assert await api.events(acme_run) == before
    assert (await api.run(acme_run))["status"] == "running"
    assert db.totals() == totals


async def test_poll_never_returns_another_tenants_task(api: Api, other: Api, acme_run: str):
    """A globex worker polling acme's activity type gets nothing; acme's worker then gets the task."""
    assert await other.poll("inventory.reserve", max_tasks=100) == []
    (task,) = await api.poll("inventory.reserve")
    assert task["run_id"] == acme_run


@pytest.mark.parametrize("verb", ["complete", "fail", "heartbeat"])
async def test_reporting_on_a_foreign_task_is_404_and_records_nothing(
    api: Api, other: Api, acme_run: str, verb: str
):
    """Reports on another tenant's task, even with its right fencing token, are 404 and change nothing."""
    (task,) = await api.poll("inventory.reserve")
    before = await api.events(acme_run)
    r = await other.report(task, verb)
    assert_problem(r, 404, "not_found")
    assert await api.events(acme_run) == before
    assert (await api.report(task, "complete")).status_code == 200
    types = [e["type"] for e in await api.events(acme_run)]
    assert "ResultIgnored" not in types
    assert (await api.run(acme_run))["current_step"] == "charge"


async def test_definitions_are_per_tenant(api: Api, other: Api, acme_run: str):
    """globex cannot list, read or start acme's definitions; the same content is globex's own version 1."""
    r = await other.c.get("/v1/definitions", headers=other.t.auth("viewer"))
    assert r.status_code == 200
    assert r.json() == []
    assert_problem(
        await other.c.get(f"/v1/definitions/{ORDER}/versions/1", headers=other.t.auth("viewer")), 404
    )
    body = assert_problem(await other.start(ORDER, order_input()), 404, "not_found")
    assert "acme" not in body["detail"]

    assert (await api.publish("name: only-acme\nsteps: [{id: s, wait: 1s}]\n")).json()["version"] == 1
    mine = await other.publish()
    assert mine.status_code == 201
    assert mine.json()["version"] == 1
    names = sorted(
        d["name"] for d in (await other.c.get("/v1/definitions", headers=other.t.auth("viewer"))).json()
    )
    assert names == [ORDER]


async def test_idempotency_keys_are_per_tenant(api: Api, other: Api, acme_run: str):
    """The same Idempotency-Key in two tenants starts two distinct runs (keys are scoped per tenant)."""
    assert (await other.publish()).status_code == 201
    a = await api.start(ORDER, order_input(), key="shared-key")
    b = await other.start(ORDER, order_input(), key="shared-key")
    assert (a.status_code, b.status_code) == (201, 201)
    assert a.json()["run_id"] != b.json()["run_id"]
