"""Per-tenant limits at the edge: start rate (token bucket) and the cap on active runs. Over a limit: 429
with Retry-After and a reason, nothing half-written; an Idempotency-Key replay is never refused."""

from __future__ import annotations

import pytest

from lockstep.app.principals import Principals

from .conftest import ORDER, Api, Db, FakeClock, assert_problem, order_input

pytestmark = pytest.mark.anyio


@pytest.fixture
async def published(api: Api, other: Api) -> None:
    assert (await api.publish()).status_code == 201
    assert (await other.publish()).status_code == 201


async def test_start_rate_limit_is_429_with_retry_after_and_writes_nothing(
    api: Api, published: None, principals: Principals, clock: FakeClock, db: Db
):
    """starts_per_second=1: 3rd rapid start is 429 + Retry-After + reason, writes nothing; later it works."""
    principals.set_tenant("acme", starts_per_second=1)
    assert (await api.start(ORDER, order_input(1))).status_code == 201
    assert (await api.start(ORDER, order_input(2))).status_code == 201
    before = db.totals()
    r = await api.start(ORDER, order_input(3), key="third")
    body = assert_problem(r, 429, "start_rate_exceeded")
    assert "starts_per_second" in body["detail"]
    retry_after = int(r.headers["retry-after"])
    assert 1 <= retry_after <= 5
    assert db.totals() == before
    assert_problem(await api.start(ORDER, order_input(3), key="third"), 429)

    clock.advance(seconds=retry_after)
    r = await api.start(ORDER, order_input(3), key="third")
    assert r.status_code == 201, r.text  # the refused key was not consumed


async def test_max_active_runs_third_start_is_429_until_one_finishes(
    api: Api, published: None, principals: Principals, db: Db
):
    """max_active_runs=2: the third start is 429 with Retry-After, writing nothing, until a run finishes."""
    principals.set_tenant("acme", max_active_runs=2)
    first = await api.start_ok(input=order_input(1))
    await api.start_ok(input=order_input(2))
    before = db.totals()
    r = await api.start(ORDER, order_input(3))
    body = assert_problem(r, 429, "too_many_active_runs")
    assert "max_active_runs=2" in body["detail"]
    assert int(r.headers["retry-after"]) >= 1
    assert db.totals() == before

    r = await api.c.post(
        f"/v1/runs/{first}/cancel", json={"reason": "make room"}, headers=api.t.auth("operator")
    )
    assert r.json()["status"] == "cancelled"
    assert (await api.start(ORDER, order_input(3))).status_code == 201


@pytest.mark.parametrize("setting", [{"max_active_runs": 1}, {"starts_per_second": 0.5}])
async def test_idempotent_replay_is_200_even_over_the_limit(
    api: Api, published: None, principals: Principals, setting: dict[str, float]
):
    """Replaying an existing run's Idempotency-Key is 200 with that run even while new starts get 429."""
    principals.set_tenant("acme", **setting)
    first = await api.start(ORDER, order_input(1), key="order-1")
    assert first.status_code == 201
    assert_problem(await api.start(ORDER, order_input(2), key="order-2"), 429)
    replay = await api.start(ORDER, order_input(1), key="order-1")
    assert replay.status_code == 200, replay.text
    assert replay.json() == {"run_id": first.json()["run_id"], "created": False}
    assert_problem(await api.start(ORDER, order_input(9), key="order-1"), 422, "key_reused")


async def test_limits_are_per_tenant(api: Api, other: Api, published: None, principals: Principals):
    """acme being over its limits does not refuse globex's starts."""
    principals.set_tenant("acme", max_active_runs=1, starts_per_second=1)
    await api.start_ok()
    assert_problem(await api.start(ORDER, order_input(2)), 429)
    for i in range(3):
        assert (await other.start(ORDER, order_input(i))).status_code == 201


async def test_rate_limited_start_with_invalid_input_is_still_422(
    api: Api, published: None, principals: Principals
):
    """A start whose input fails the schema is a 422 and does not spend a token of the rate limit."""
    principals.set_tenant("acme", starts_per_second=0.5)  # a burst of one start
    assert_problem(await api.start(ORDER, {"order_id": "x"}), 422)
    assert (await api.start(ORDER, order_input())).status_code == 201
