"""External workers over HTTP: poll (long-poll) for leased tasks, heartbeat, complete and fail with the
attempt and fencing token; stale reports are 409 and recorded as ResultIgnored."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import anyio
import pytest

from lockstep.engine import Engine

from .conftest import ORDER, Api, FakeClock, assert_problem, order_input

pytestmark = pytest.mark.anyio

TASK_FIELDS = {
    "task_id",
    "tenant",
    "run_id",
    "step",
    "attempt",
    "kind",
    "activity",
    "input",
    "idempotency_key",
    "definition",
    "version",
    "delivery",
    "fencing_token",
    "deadline",
    "traceparent",
}


@pytest.fixture
async def run_id(api: Api) -> str:
    assert (await api.publish()).status_code == 201
    return await api.start_ok(input=order_input(42))


async def types(api: Api, run_id: str) -> list[str]:
    return [e["type"] for e in await api.events(run_id)]


async def test_poll_returns_a_leased_task_with_everything_a_worker_needs(api: Api, run_id: str):
    """A poll leases the task with ids, attempt, fencing token, idempotency key, version and mapped input."""
    (task,) = await api.poll("inventory.reserve", worker_id="w-7")
    assert set(task) == TASK_FIELDS
    assert task["run_id"] == run_id
    assert task["step"] == "reserve"
    assert task["attempt"] == 1
    assert task["kind"] == "action"
    assert task["activity"] == "inventory.reserve"
    assert task["idempotency_key"] == "reserve-o-42"
    assert (task["definition"], task["version"]) == (ORDER, 1)
    assert task["input"] == {"order_id": "o-42", "sku": "widget", "qty": 1, "fail_times": 0}
    assert isinstance(task["fencing_token"], int)
    assert task["traceparent"].startswith("00-")  # the attempt span's context (app/tracing)
    events = await api.events(run_id)
    started = events[-1]
    assert started["type"] == "ActivityStarted"
    assert started["data"]["worker"] == "worker/w-7"
    assert started["data"]["fencing"] == task["fencing_token"]
    assert (await api.run(run_id))["wait_kind"] == "running"
    assert await api.poll("inventory.reserve") == []  # leased: nobody else gets it


async def test_poll_only_returns_the_requested_activity_types_up_to_max_tasks(api: Api, run_id: str):
    """A poll gets only tasks of the listed activity types, at most max_tasks of them."""
    for i in range(2):
        await api.start_ok(input=order_input(i))
    assert await api.poll("payments.charge", "shipping.create") == []
    assert len(await api.poll("inventory.reserve", max_tasks=2)) == 2
    assert len(await api.poll("inventory.reserve", max_tasks=2)) == 1
    assert await api.poll("inventory.reserve", max_tasks=2) == []


async def test_complete_advances_the_run_and_a_duplicate_is_409_recorded(api: Api, run_id: str):
    """complete is 200 and advances the run; a duplicate is 409 stale_result recorded as ResultIgnored."""
    (task,) = await api.poll("inventory.reserve")
    r = await api.report(task, "complete", output={"reservation_id": "r-1"})
    assert r.status_code == 200, r.text
    assert r.json() == {"outcome": "accepted"}
    run = await api.run(run_id)
    assert run["current_step"] == "charge"
    assert run["steps"]["reserve"]["status"] == "succeeded"
    assert run["steps"]["reserve"]["output"] == {"reservation_id": "r-1"}

    dup = await api.report(task, "complete", output={"reservation_id": "r-1"})
    body = assert_problem(dup, 409, "stale_result")
    assert task["task_id"] in body["detail"]
    events = await api.events(run_id)
    assert events[-1]["type"] == "ResultIgnored"
    assert events[-1]["data"]["task_id"] == task["task_id"]
    assert events[-1]["data"]["reason"]
    after = await api.run(run_id)
    assert after["ignored_results"] == 1
    assert {k: v for k, v in after.items() if k not in ("seq", "ignored_results", "updated_at")} == {
        k: v for k, v in run.items() if k not in ("seq", "ignored_results", "updated_at")
    }


async def test_wrong_fencing_token_is_409_and_recorded(api: Api, run_id: str):
    """A report with a wrong fencing token is 409 stale_result (recorded); the right holder then completes."""
    (task,) = await api.poll("inventory.reserve")
    for verb in ("complete", "fail"):
        r = await api.report({**task, "fencing_token": task["fencing_token"] + 1}, verb)
        assert_problem(r, 409, "stale_result")
    assert (await types(api, run_id))[-2:] == ["ResultIgnored", "ResultIgnored"]
    assert (await api.run(run_id))["steps"]["reserve"]["status"] != "succeeded"
    assert (await api.report(task, "complete")).status_code == 200
    assert (await api.run(run_id))["current_step"] == "charge"


async def test_wrong_attempt_is_409(api: Api, run_id: str):
    """A report naming an attempt that is not the current one is 409 stale_result."""
    (task,) = await api.poll("inventory.reserve")
    assert_problem(await api.report({**task, "attempt": 2}, "complete"), 409, "stale_result")


async def test_expired_lease_makes_the_old_worker_stale(
    api: Api, run_id: str, engine: Engine, clock: FakeClock
):
    """After lease expiry and a 2nd attempt, the old worker's heartbeat/complete are 409; the new one wins."""
    (first,) = await api.poll("inventory.reserve", lease_seconds=1)
    clock.advance(seconds=2)
    assert engine.service.expire_leases() == 1
    clock.advance(seconds=1)
    assert engine.service.fire_due_timers() == 1
    (second,) = await api.poll("inventory.reserve", worker_id="w-2")
    assert second["attempt"] == 2
    assert second["fencing_token"] > first["fencing_token"]
    assert second["idempotency_key"] == first["idempotency_key"]

    assert_problem(await api.report(first, "heartbeat"), 409, "lease_lost")
    assert_problem(await api.report(first, "complete"), 409, "stale_result")
    ignored = (await api.events(run_id))[-1]
    assert ignored["type"] == "ResultIgnored"
    assert ignored["data"]["attempt"] == 1

    assert (await api.report(second, "heartbeat")).json() == {"ok": True}
    assert (await api.report(second, "complete")).status_code == 200
    assert (await api.run(run_id))["current_step"] == "charge"


async def test_heartbeat_extends_the_lease(api: Api, run_id: str, engine: Engine, clock: FakeClock):
    """A heartbeat keeps a lease alive past its original expiry; without heartbeats it expires."""
    (task,) = await api.poll("inventory.reserve", lease_seconds=3)
    clock.advance(seconds=2)
    r = await api.c.post(
        f"/v1/tasks/{task['task_id']}/heartbeat",
        json={"fencing_token": task["fencing_token"], "lease_seconds": 3},
        headers=api.t.auth("worker"),
    )
    assert r.status_code == 200, r.text
    assert r.json() == {"ok": True}
    clock.advance(seconds=2)  # past the original lease, within the extended one
    assert engine.service.expire_leases() == 0
    clock.advance(seconds=2)
    assert engine.service.expire_leases() == 1
    assert "ActivityTimedOut" in await types(api, run_id)


async def test_heartbeat_with_a_wrong_token_or_unknown_task_is_refused(api: Api, run_id: str):
    """Heartbeat with a wrong fencing token is 409 lease_lost; for an unknown task id it is 404."""
    (task,) = await api.poll("inventory.reserve")
    assert_problem(await api.report({**task, "fencing_token": 0}, "heartbeat"), 409, "lease_lost")
    assert_problem(await api.report({**task, "task_id": "nope/reserve/a1"}, "heartbeat"), 404, "not_found")
    assert_problem(await api.report({**task, "task_id": "nope/reserve/a1"}, "complete"), 404, "not_found")
    assert_problem(await api.report({**task, "task_id": "nope/reserve/a1"}, "fail"), 404, "not_found")


async def test_fail_not_retryable_fails_the_run(api: Api, run_id: str):
    """fail with retryable=false -> 200 accepted and the run is failed with the worker's error."""
    (task,) = await api.poll("inventory.reserve")
    r = await api.report(task, "fail", retryable=False, error={"code": "OutOfStock", "message": "none left"})
    assert r.status_code == 200, r.text
    run = await api.run(run_id)
    assert run["status"] == "failed"
    assert run["error"]["code"] == "OutOfStock"
    assert run["wait_kind"] is None
    assert_problem(await api.report(task, "complete"), 409, "stale_result")


async def test_fail_retryable_schedules_a_retry(api: Api, run_id: str, engine: Engine, clock: FakeClock):
    """fail with retryable=true makes the run wait for a retry (not failed); attempt 2 follows the timer."""
    (task,) = await api.poll("inventory.reserve")
    assert (await api.report(task, "fail", error={"code": "Flaky"})).status_code == 200
    run = await api.run(run_id)
    assert (run["status"], run["wait_kind"]) != ("failed", None)
    assert run["wait_kind"] == "retry"
    assert await api.poll("inventory.reserve") == []
    clock.advance(seconds=5)
    engine.service.fire_due_timers()
    (again,) = await api.poll("inventory.reserve")
    assert again["attempt"] == 2


@pytest.mark.parametrize(
    "body",
    [
        {"attempt": 1, "fencing_token": 1},
        {"attempt": 1, "fencing_token": 1, "error": {}},
        {"attempt": 0, "fencing_token": 1, "error": {"code": "E"}},
        {"fencing_token": 1, "error": {"code": "E"}},
        {"attempt": 1, "fencing_token": -1, "error": {"code": "E"}},
    ],
)
async def test_fail_body_is_validated(api: Api, run_id: str, body: dict[str, Any]):
    """A fail without an error code, attempt or a valid fencing token is a 422 problem."""
    (task,) = await api.poll("inventory.reserve")
    r = await api.c.post(f"/v1/tasks/{task['task_id']}/fail", json=body, headers=api.t.auth("worker"))
    assert_problem(r, 422)


@pytest.mark.parametrize(
    "body",
    [
        {"activities": []},
        {"activities": "inventory.reserve"},
        {"activities": ["a"], "wait_seconds": 31},
        {"activities": ["a"], "max_tasks": 0},
        {"activities": ["a"], "lease_seconds": 0},
        {"activities": ["a"], "surprise": True},
    ],
)
async def test_poll_body_is_validated(api: Api, body: dict[str, Any]):
    """A poll with no activities, or out-of-range wait/max/lease, or unknown fields is a 422 problem."""
    r = await api.c.post("/v1/tasks/poll", json=body, headers=api.t.auth("worker"))
    assert_problem(r, 422)


async def test_a_whole_run_driven_by_an_http_worker_completes(api: Api, run_id: str):
    """An HTTP worker taking reserve, charge and ship completes the run with the mapped output."""
    outputs = {
        "inventory.reserve": {"reservation_id": "r-42"},
        "payments.charge": {"charge_id": "c-42"},
        "shipping.create": {"tracking": "t-42"},
    }
    for activity, output in outputs.items():
        (task,) = await api.poll(*outputs)
        assert task["activity"] == activity
        assert (await api.report(task, "complete", output=output)).status_code == 200
    run = await api.run(run_id)
    assert run["status"] == "completed"
    assert run["output"] == {"order_id": "o-42", "charge_id": "c-42", "tracking": "t-42"}


async def test_compensation_tasks_are_polled_like_actions(api: Api, run_id: str):
    """After a cancel the compensation task is polled as kind=compensation; completing it cancels the run."""
    (task,) = await api.poll("inventory.reserve")
    assert (await api.report(task, "complete", output={"reservation_id": "r-9"})).status_code == 200
    r = await api.c.post(
        f"/v1/runs/{run_id}/cancel", json={"reason": "fraud"}, headers=api.t.auth("operator")
    )
    assert r.status_code == 200
    (comp,) = await api.poll("inventory.release")
    assert comp["kind"] == "compensation"
    assert comp["input"] == {"reservation_id": "r-9"}
    assert (await api.report(comp, "complete")).status_code == 200
    assert (await api.run(run_id))["status"] == "cancelled"


# --- long-poll -------------------------------------------------------------------------------------


async def test_long_poll_without_tasks_returns_empty_after_the_wait(api: Api, other: Api, run_id: str):
    """A long-poll with nothing to take (only another tenant's task) returns empty after ~wait_seconds."""
    t0 = time.monotonic()
    r = await other.c.post(
        "/v1/tasks/poll",
        json={"activities": ["inventory.reserve"], "wait_seconds": 1},
        headers=other.t.auth("worker"),
    )
    elapsed = time.monotonic() - t0
    assert r.status_code == 200
    assert r.json() == {"tasks": []}
    assert 0.9 <= elapsed < 2.0


async def test_long_poll_returns_as_soon_as_a_task_is_scheduled(
    api: Api, engine: Engine, monkeypatch: pytest.MonkeyPatch
):
    """A long-poll returns a task started while it waits well before its wait_seconds are over."""
    assert (await api.publish()).status_code == 201
    polled_empty = threading.Event()
    claim = engine.service.claim

    def spy(*args: Any, **kwargs: Any) -> Any:
        out = claim(*args, **kwargs)
        if not out:
            polled_empty.set()
        return out

    monkeypatch.setattr(engine.service, "claim", spy)
    t0 = time.monotonic()
    waiting = asyncio.create_task(
        api.c.post(
            "/v1/tasks/poll",
            json={"activities": ["inventory.reserve"], "wait_seconds": 5},
            headers=api.t.auth("worker"),
        )
    )
    assert await anyio.to_thread.run_sync(polled_empty.wait, 5)  # the poll is waiting with nothing to take
    run_id = await api.start_ok()
    r = await waiting
    elapsed = time.monotonic() - t0
    assert r.status_code == 200, r.text
    (task,) = r.json()["tasks"]
    assert task["run_id"] == run_id
    assert elapsed < 3.0
