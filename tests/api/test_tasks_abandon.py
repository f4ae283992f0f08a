"""POST /v1/tasks/abandon: a remote worker restarted under its id hands back the leases its dead
predecessor held (retried at once, not at lease expiry), only its own and only in its own tenant."""

from __future__ import annotations

import pytest

from lockstep.engine import Engine

from .conftest import Api, FakeClock, assert_problem, order_input

pytestmark = pytest.mark.anyio


async def abandon(api: Api, worker_id: str, role: str = "worker") -> dict[str, object]:
    r = await api.c.post("/v1/tasks/abandon", json={"worker_id": worker_id}, headers=api.t.auth(role))
    assert r.status_code == 200, r.text
    out: dict[str, object] = r.json()
    return out


async def test_abandoning_a_dead_workers_leases_makes_its_task_claimable_again_at_once(
    api: Api, engine: Engine, clock: FakeClock
):
    """A lease of `worker/w-1` with an hour left is given up: the scheduler's next pass expires it
    (no clock advance) and the retry is leased anew, the old lease fenced off."""
    assert (await api.publish()).status_code == 201
    run_id = await api.start_ok(input=order_input(1))
    (task,) = await api.poll("inventory.reserve", worker_id="w-1", lease_seconds=3600)
    assert await api.poll("inventory.reserve") == []  # leased for an hour
    assert await abandon(api, "w-1") == {"abandoned": 1}
    assert engine.service.expire_leases() == 1
    clock.advance(seconds=5)  # the retry's back-off
    assert engine.service.fire_due_timers() == 1
    (again,) = await api.poll("inventory.reserve", worker_id="w-1")
    assert again["run_id"] == run_id
    assert again["fencing_token"] > task["fencing_token"]  # the old lease's results are fenced off
    stale = await api.report(task)
    assert_problem(stale, 409, "stale_result")
    assert await abandon(api, "w-2") == {"abandoned": 0}  # another id's leases: none


async def test_another_tenants_worker_of_the_same_user_name_and_id_cannot_abandon_the_lease(
    api: Api, other: Api, engine: Engine
):
    """Attack: tenant globex's `worker` user abandons `w-1` (the very owner string acme's lease has):
    acme's lease stays held."""
    assert (await api.publish()).status_code == 201
    await api.start_ok(input=order_input(2))
    (task,) = await api.poll("inventory.reserve", worker_id="w-1", lease_seconds=3600)
    assert await abandon(other, "w-1") == {"abandoned": 0}
    assert engine.service.expire_leases() == 0
    assert await api.poll("inventory.reserve") == []
    assert (await api.report(task)).status_code == 200  # still its lease


async def test_abandon_needs_the_worker_role_and_a_worker_id(api: Api):
    """An operator key is refused 403; a missing or empty worker_id is 422; nothing is abandoned."""
    r = await api.c.post("/v1/tasks/abandon", json={"worker_id": "w-1"}, headers=api.t.auth("operator"))
    assert_problem(r, 403, "forbidden")
    for body in ({}, {"worker_id": ""}, {"worker_id": "x" * 201}, {"worker_id": "w", "extra": 1}):
        r = await api.c.post("/v1/tasks/abandon", json=body, headers=api.t.auth("worker"))
        assert_problem(r, 422)
