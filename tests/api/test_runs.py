"""POST /v1/runs (with Idempotency-Key), GET /v1/runs/{id}, GET /v1/runs (filters, cursor pagination),
GET /v1/runs/{id}/events and POST /v1/runs/{id}/cancel."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lockstep.engine import Engine

from .conftest import NAP, ORDER, Api, Db, FakeClock, assert_problem, order_input

pytestmark = pytest.mark.anyio

RISKY = {
    "name": "risky",
    "steps": [{"id": "pay", "activity": "bank.pay", "timeout": "30s", "delivery": "at_most_once"}],
}


@pytest.fixture
async def published(api: Api) -> None:
    for doc in (None, NAP, RISKY):
        r = await (api.publish() if doc is None else api.publish(doc))
        assert r.status_code == 201, r.text


# --- start ---------------------------------------------------------------------------------------


async def test_start_returns_201_and_a_run_id(api: Api, published: None, engine: Engine):
    """POST /v1/runs is 201 with run_id, created=true; the run pins the latest version, records the actor."""
    r = await api.start(ORDER, order_input())
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["created"] is True
    run = await api.run(body["run_id"])
    assert run["status"] == "running"
    assert run["definition"]["version"] == 1
    (started, *_) = await api.events(body["run_id"])
    assert started["type"] == "RunStarted"
    assert started["data"]["actor"] == "operator"


async def test_start_pins_the_requested_version(api: Api, published: None):
    """With "version": 1 the run pins v1 even after v2 is published; without it, the latest."""
    changed = {**NAP, "steps": [{"id": "nap", "wait": "2h"}]}
    assert (await api.publish(changed)).json()["version"] == 2
    old = await api.start_ok("nap", version=1)
    new = await api.start_ok("nap")
    assert (await api.run(old))["definition"]["version"] == 1
    assert (await api.run(new))["definition"]["version"] == 2
    assert_problem(await api.start("nap", version=3), 404, "not_found")


async def test_same_idempotency_key_and_body_returns_the_same_run(api: Api, published: None, db: Db):
    """Same Idempotency-Key + same body: 200 with the same run_id and created=false; one run exists."""
    first = await api.start(ORDER, order_input(), key="order-42")
    assert first.status_code == 201
    again = await api.start(ORDER, order_input(), key="order-42")
    assert again.status_code == 200, again.text
    assert again.json() == {"run_id": first.json()["run_id"], "created": False}
    assert db.count("runs") == 1


async def test_same_idempotency_key_with_a_different_body_is_422_key_reused(
    api: Api, published: None, db: Db
):
    """Same Idempotency-Key, different body: 422 key_reused naming the first run; nothing written."""
    first = (await api.start(ORDER, order_input(), key="k1")).json()["run_id"]
    totals = db.totals()
    for kwargs in (
        {"definition": ORDER, "input": order_input(2)},
        {"definition": "nap"},
        {"definition": ORDER, "input": order_input(), "version": 1},
    ):
        r = await api.start(key="k1", **kwargs)
        body = assert_problem(r, 422, "key_reused")
        assert first in body["detail"]
    assert db.totals() == totals


async def test_without_idempotency_key_each_start_is_a_new_run(api: Api, published: None):
    """Two identical starts without a key are two runs."""
    assert await api.start_ok() != await api.start_ok()


async def test_start_unknown_definition_is_404(api: Api, published: None, db: Db):
    """Starting an unpublished definition is a 404 not_found problem that lists what is published."""
    body = assert_problem(await api.start("no-such-process", {}), 404, "not_found")
    assert ORDER in body["detail"]
    assert db.count("runs") == 0


@pytest.mark.parametrize(
    "bad",
    [
        {"order_id": "o-1", "sku": "w", "qty": 0, "amount": 1},
        {"order_id": "o-1", "sku": "w", "amount": 1},
        {"order_id": 1, "sku": "w", "qty": 1, "amount": 1},
        "not an object",
        None,
    ],
)
async def test_input_failing_the_input_schema_is_422_and_writes_nothing(
    api: Api, published: None, db: Db, bad: Any
):
    """Input failing the input_schema is a 422 and writes no run/event/task/timer; the key stays free."""
    before = db.totals()
    r = await api.c.post(
        "/v1/runs",
        json={"definition": ORDER, "input": bad},
        headers={**api.t.auth("operator"), "Idempotency-Key": "k"},
    )
    body = assert_problem(r, 422)
    assert body["detail"]
    assert db.totals() == before
    assert (await api.list_runs()).json()["items"] == []
    assert (await api.start(ORDER, order_input(), key="k")).status_code == 201


@pytest.mark.parametrize(
    "body",
    [{"definition": "Has Spaces"}, {"definition": ""}, {"definition": ORDER, "version": 0}, {"input": {}}],
)
async def test_start_request_validation(api: Api, published: None, body: dict[str, Any]):
    """A malformed start request (bad name, version 0, no definition) is a 422 problem."""
    r = await api.c.post("/v1/runs", json=body, headers=api.t.auth("operator"))
    assert_problem(r, 422)


# --- a zoo of runs, one per wait kind --------------------------------------------------------------


@pytest.fixture
async def zoo(api: Api, published: None, engine: Engine, clock: FakeClock) -> dict[str, str]:
    """Runs in every interesting state: name -> run_id. Each step is driven over the API (and the fake clock
    plus the scheduler's duties where time must pass)."""
    runs: dict[str, str] = {}
    # attention: an at-most-once payment whose worker vanished; it must not be retried blindly.
    runs["attention"] = await api.start_ok("risky", {})
    assert len(await api.poll("bank.pay", lease_seconds=1)) == 1
    clock.advance(seconds=2)
    assert engine.service.expire_leases() == 1
    clock.advance(milliseconds=1)
    # running: a worker holds the reserve task.
    runs["running"] = await api.start_ok(input=order_input(1))
    assert len(await api.poll("inventory.reserve")) == 1
    clock.advance(milliseconds=1)
    # retry: the reserve attempt failed (retryable), a retry timer is armed.
    runs["retry"] = await api.start_ok(input=order_input(2))
    (t,) = await api.poll("inventory.reserve")
    assert (await api.report(t, "fail", retryable=True)).status_code == 200
    clock.advance(milliseconds=1)
    # cancelling: cancel requested while a worker holds the task; it waits for the result.
    runs["cancelling"] = await api.start_ok(input=order_input(3))
    (t,) = await api.poll("inventory.reserve")
    r = await api.c.post(
        f"/v1/runs/{runs['cancelling']}/cancel",
        json={"reason": "customer called"},
        headers=api.t.auth("operator"),
    )
    assert r.status_code == 200, r.text
    clock.advance(milliseconds=1)
    # compensating: reserve done, then cancelled: the reservation is released.
    runs["compensating"] = await api.start_ok(input=order_input(4))
    (t,) = await api.poll("inventory.reserve")
    assert (await api.report(t, "complete", output={"reservation_id": "r-4"})).status_code == 200
    r = await api.c.post(
        f"/v1/runs/{runs['compensating']}/cancel", json={"reason": "fraud"}, headers=api.t.auth("operator")
    )
    assert r.status_code == 200, r.text
    clock.advance(milliseconds=1)
    # cancelled: cancelled before any worker took its task.
    runs["cancelled"] = await api.start_ok(input=order_input(5))
    r = await api.c.post(
        f"/v1/runs/{runs['cancelled']}/cancel", json={"reason": "dup"}, headers=api.t.auth("operator")
    )
    assert r.json()["status"] == "cancelled"
    clock.advance(milliseconds=1)
    # timer: sleeping for an hour.
    runs["timer"] = await api.start_ok("nap", {})
    clock.advance(milliseconds=1)
    # queued: nobody polled yet (created last so the polls above cannot take it).
    runs["queued"] = await api.start_ok(input=order_input(6))
    return runs


async def test_get_run_equals_service_show(api: Api, zoo: dict[str, str], engine: Engine):
    """GET /v1/runs/{id} equals Service.show (`lockstep show --json`) for runs in every state."""
    for name, run_id in zoo.items():
        assert await api.run(run_id) == engine.service.show("acme", run_id).plain(), name


async def test_waiting_run_is_explained_not_failed(api: Api, zoo: dict[str, str]):
    """Every waiting run has a wait_kind, a wait_reason and a next_action, and none of them looks failed."""
    for name, run_id in zoo.items():
        run = await api.run(run_id)
        if name == "cancelled":
            assert run["wait_kind"] is None
            continue
        assert run["status"] != "failed", name
        assert run["wait_kind"] == name, (name, run["wait_kind"])
        assert run["wait_reason"], name
        assert run["next_action"], name


@pytest.mark.parametrize(
    "kind", ["queued", "running", "timer", "retry", "attention", "cancelling", "compensating"]
)
async def test_list_runs_filters_by_wait_kind(api: Api, zoo: dict[str, str], kind: str):
    """GET /v1/runs?waiting=KIND lists exactly the runs waiting for that reason."""
    r = await api.list_runs(waiting=kind)
    assert r.status_code == 200, r.text
    assert [x["run_id"] for x in r.json()["items"]] == [zoo[kind]]
    assert r.json()["items"][0]["wait_kind"] == kind


async def test_list_runs_filters_by_status_and_definition(api: Api, zoo: dict[str, str], engine: Engine):
    """status and definition filter the list (and combine); items equal Service.show of each run."""

    async def ids(**params: Any) -> set[str]:
        r = await api.list_runs(**params)
        assert r.status_code == 200, r.text
        for item in r.json()["items"]:
            assert item == engine.service.show("acme", item["run_id"]).plain()
        return {x["run_id"] for x in r.json()["items"]}

    assert await ids() == set(zoo.values())
    assert await ids(status="cancelled") == {zoo["cancelled"]}
    assert await ids(status="needs_attention") == {zoo["attention"]}
    assert await ids(definition="nap") == {zoo["timer"]}
    assert await ids(definition="risky") == {zoo["attention"]}
    order_runs = {zoo[k] for k in ("running", "retry", "cancelling", "compensating", "cancelled", "queued")}
    assert await ids(definition=ORDER) == order_runs
    assert await ids(status="completed") == set()
    assert await ids(definition="nap", status="cancelled") == set()
    waiting_order = await ids(definition=ORDER, waiting="queued")
    assert waiting_order == {zoo["queued"]}


@pytest.mark.parametrize(
    "params",
    [{"status": "sleeping"}, {"waiting": "coffee"}, {"limit": 0}, {"limit": 501}, {"limit": "x"}],
)
async def test_list_runs_rejects_unknown_filters(api: Api, params: dict[str, Any]):
    """An unknown status or wait kind, or a limit outside 1..500, is a 422 problem listing what is allowed."""
    body = assert_problem(await api.list_runs(**params), 422)
    if "status" in params:
        assert "needs_attention" in body["detail"]
    if "waiting" in params:
        assert "timer" in body["detail"]


async def _all_pages(api: Api, **params: Any) -> list[list[str]]:
    pages: list[list[str]] = []
    cursor: str | None = None
    while True:
        q = dict(params)
        if cursor is not None:
            q["cursor"] = cursor
        r = await api.list_runs(**q)
        assert r.status_code == 200, r.text
        pages.append([x["run_id"] for x in r.json()["items"]])
        cursor = r.json()["next_cursor"]
        if cursor is None:
            return pages
        assert len(pages) < 50, "pagination does not terminate"


@pytest.mark.parametrize(("n", "limit"), [(7, 3), (6, 3), (2, 5), (1, 1)])
async def test_cursor_pagination_lists_every_run_once_newest_first(
    api: Api, published: None, clock: FakeClock, n: int, limit: int
):
    """Following next_cursor lists every run exactly once, newest first, pages <= limit, ending with null."""
    started = []
    for i in range(n):
        started.append(await api.start_ok(input=order_input(i)))
        clock.advance(milliseconds=5)
    pages = await _all_pages(api, limit=limit)
    assert all(len(p) <= limit for p in pages)
    flat = [x for p in pages for x in p]
    assert flat == list(reversed(started))
    assert len(flat) == len(set(flat))


async def test_cursor_pagination_with_a_wait_filter(api: Api, published: None, clock: FakeClock):
    """Paginating a wait-kind filter lists each matching run exactly once (non-matching ones interleaved)."""
    timers, queued = [], []
    for i in range(9):
        if i % 3 == 0:
            queued.append(await api.start_ok(input=order_input(i)))
        else:
            timers.append(await api.start_ok("nap", {}))
        clock.advance(milliseconds=5)
    for limit in (1, 2, 4, 100):
        pages = await _all_pages(api, waiting="timer", limit=limit)
        flat = [x for p in pages for x in p]
        assert flat == list(reversed(timers)), limit
        pages = await _all_pages(api, waiting="queued", limit=limit)
        assert [x for p in pages for x in p] == list(reversed(queued)), limit


# --- events ----------------------------------------------------------------------------------------


async def test_events_are_the_ordered_history(api: Api, zoo: dict[str, str], engine: Engine):
    """GET /v1/runs/{id}/events is the full history in seq order (as Service.events); after_seq filters."""
    run_id = zoo["compensating"]
    events = await api.events(run_id)
    expected = [{"step": None, "attempt": None, **e.plain()} for e in engine.service.events("acme", run_id)]
    assert events == expected
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    types = [e["type"] for e in events]
    assert types[0] == "RunStarted"
    assert "ActivitySucceeded" in types
    assert "CancelRequested" in types
    cancel = next(e for e in events if e["type"] == "CancelRequested")
    assert cancel["data"]["reason"] == "fraud"
    assert cancel["data"]["actor"] == "operator"
    r = await api.c.get(f"/v1/runs/{run_id}/events", params={"after_seq": 2}, headers=api.t.auth("viewer"))
    assert r.json() == {"items": events[2:], "next_cursor": None}
    r = await api.c.get(f"/v1/runs/{run_id}/events", params={"after_seq": -1}, headers=api.t.auth("viewer"))
    assert_problem(r, 422)


async def test_unknown_run_is_404(api: Api):
    """GET, events and cancel of an unknown run id are 404 not_found problems."""
    h = api.t.auth("admin")
    for method, path, body in (
        ("GET", "/v1/runs/nope", None),
        ("GET", "/v1/runs/nope/events", None),
        ("POST", "/v1/runs/nope/cancel", {"reason": "x"}),
    ):
        assert_problem(await api.c.request(method, path, json=body, headers=h), 404, "not_found")


# --- cancel ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("body", [None, {}, {"reason": ""}, {"reason": "   "}, {"reason": "x", "extra": 1}])
async def test_cancel_requires_a_reason(api: Api, published: None, body: Any):
    """Cancel without a (non-blank) reason is a 422 problem and the run keeps running."""
    run_id = await api.start_ok()
    r = await api.c.post(f"/v1/runs/{run_id}/cancel", json=body, headers=api.t.auth("operator"))
    assert_problem(r, 422)
    assert (await api.run(run_id))["status"] == "running"


async def test_cancel_then_cancel_again_is_409(api: Api, published: None):
    """Cancelling a queued run is 200 (cancelled, accepted); cancelling the finished run again is 409."""
    run_id = await api.start_ok()
    r = await api.c.post(f"/v1/runs/{run_id}/cancel", json={"reason": "test"}, headers=api.t.auth("operator"))
    assert r.status_code == 200, r.text
    assert r.json() == {"run_id": run_id, "status": "cancelled", "accepted": True}
    n = len(await api.events(run_id))
    r = await api.c.post(
        f"/v1/runs/{run_id}/cancel", json={"reason": "again"}, headers=api.t.auth("operator")
    )
    body = assert_problem(r, 409)
    assert "cancelled" in body["detail"]
    assert len(await api.events(run_id)) == n


async def test_cancel_of_a_cancelling_run_is_accepted_false(api: Api, zoo: dict[str, str]):
    """Cancelling a run already cancelling is 200 with accepted=false and records nothing new."""
    run_id = zoo["cancelling"]
    n = len(await api.events(run_id))
    r = await api.c.post(
        f"/v1/runs/{run_id}/cancel", json={"reason": "again"}, headers=api.t.auth("operator")
    )
    assert r.status_code == 200, r.text
    assert r.json() == {"run_id": run_id, "status": "cancelling", "accepted": False}
    assert len(await api.events(run_id)) == n


async def test_cancel_of_a_completed_run_is_409(api: Api, published: None, engine: Engine, clock: FakeClock):
    """A run that completed cannot be cancelled: 409 problem, status stays completed."""
    run_id = await api.start_ok("nap", {})
    clock.advance(hours=2)
    assert engine.service.fire_due_timers() == 1
    assert (await api.run(run_id))["status"] == "completed"
    r = await api.c.post(f"/v1/runs/{run_id}/cancel", json={"reason": "late"}, headers=api.t.auth("operator"))
    assert_problem(r, 409)
    assert (await api.run(run_id))["status"] == "completed"


async def test_a_json_body_sent_as_a_form_is_415_saying_which_header_to_add(
    api: Api, published: None, db: Db
):
    """`curl -d '{...}'` (a form content type) is answered 415 naming Content-Type: application/json,
    not "Input should be a valid dictionary"; nothing is written."""
    before = db.totals()
    r = await api.c.post(
        "/v1/runs",
        content=json.dumps({"definition": ORDER, "input": order_input()}),
        headers={**api.t.auth("operator"), "Content-Type": "application/x-www-form-urlencoded"},
    )
    body = assert_problem(r, 415)
    assert "Content-Type: application/json" in body["detail"]
    assert "application/x-www-form-urlencoded" in body["detail"]
    assert db.totals() == before


async def test_events_come_a_page_at_a_time(api: Api):
    """GET /v1/runs/{id}/events?limit=N gives N events and a next_cursor (the last seq) while more
    follow; following the cursors gives the whole history once, the last page's next_cursor is null."""
    assert (await api.publish()).status_code in (200, 201)
    run_id = await api.start_ok()
    await api.c.post(f"/v1/runs/{run_id}/cancel", json={"reason": "x"}, headers=api.t.auth("operator"))
    whole = await api.events(run_id)
    assert len(whole) >= 3
    seen: list[dict[str, Any]] = []
    cursor = 0
    for _ in range(len(whole)):
        r = await api.c.get(
            f"/v1/runs/{run_id}/events",
            params={"after_seq": cursor, "limit": 2},
            headers=api.t.auth("viewer"),
        )
        page = r.json()
        assert len(page["items"]) <= 2
        seen += page["items"]
        if page["next_cursor"] is None:
            break
        assert page["next_cursor"] == page["items"][-1]["seq"]
        cursor = page["next_cursor"]
    assert seen == whole
    r = await api.c.get(f"/v1/runs/{run_id}/events", params={"limit": 0}, headers=api.t.auth("viewer"))
    assert_problem(r, 422)
