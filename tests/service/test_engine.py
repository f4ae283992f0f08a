"""The embedding API end to end on both backends: Engine + a real in-process Worker thread + activities."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

import lockstep
from lockstep import ActivityContext, ActivityError, Engine, Registry
from lockstep.runtime.worker import Worker

RETRY = {"max_attempts": 5, "initial_interval": "50ms", "backoff": 1.0}
WAIT = 15.0  # generous ceiling for wait_for; runs normally finish in well under a second


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """An engine on each backend's database (see conftest.db_url), closed after the test."""
    e = Engine.open(db_url)
    try:
        yield e
    finally:
        e.close()


@pytest.fixture
def reg() -> Registry:
    return Registry()


@pytest.fixture
def run_worker(engine: Engine) -> Iterator[Callable[[Registry], Worker]]:
    """Start workers on demand; every one is stopped (drained) before the engine closes."""
    started: list[Worker] = []

    def start(registry: Registry) -> Worker:
        w = engine.worker(registry, lease_ttl=timedelta(seconds=1), concurrency=2).start()
        started.append(w)
        return w

    try:
        yield start
    finally:
        for w in started:
            w.stop(timeout=10)


def test_an_activity_failing_twice_then_succeeding_completes_with_three_attempts(engine, reg, run_worker):
    """Retryable failures are retried on durable timers; the third attempt succeeds and the run completes."""
    seen: list[tuple[int, str]] = []

    @lockstep.activity("flaky.call", registry=reg)
    def flaky(payload: dict[str, Any], ctx: ActivityContext) -> dict[str, Any]:
        seen.append((ctx.attempt, ctx.idempotency_key))
        if ctx.attempt < 3:
            raise ActivityError("Unavailable", f"attempt {ctx.attempt} failed")
        return {"echo": payload["n"], "attempt": ctx.attempt}

    engine.publish(
        {
            "name": "flaky",
            "steps": [
                {
                    "id": "call",
                    "activity": "flaky.call",
                    "input": {"n": "${input.n}"},
                    "timeout": "5s",
                    "retry": RETRY,
                }
            ],
        }
    )
    run = engine.start("flaky", input={"n": 7}, key="flaky-7")
    run_worker(reg)
    shown = engine.wait_for(run, timeout=WAIT)
    assert shown["status"] == "completed", shown
    assert shown["output"] == {"echo": 7, "attempt": 3}
    assert shown["steps"]["call"]["attempts"] == 3
    assert [a for a, _ in seen] == [1, 2, 3]
    assert len({k for _, k in seen}) == 1  # the idempotency key is stable across retries
    kinds = [e["type"] for e in engine.events(run)]
    assert kinds.count("ActivityFailed") == 2
    assert kinds.count("ActivitySucceeded") == 1
    assert engine.verify(run)[0]["ok"] is True


def test_sync_and_async_activities_both_run(engine, reg, run_worker):
    """A plain function and a coroutine function are both valid activities; outputs flow step to step."""

    @lockstep.activity("calc.double", registry=reg)
    def double(payload: dict[str, Any]) -> dict[str, Any]:
        return {"value": payload["value"] * 2}

    @lockstep.activity("calc.add_one", registry=reg)
    async def add_one(payload: dict[str, Any], ctx: ActivityContext) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"value": payload["value"] + 1, "step": ctx.step_id}

    engine.publish(
        """
name: calc
steps:
  - id: double
    activity: calc.double
    input: {value: "${input.value}"}
    timeout: 5s
  - id: add
    activity: calc.add_one
    input: {value: "${steps.double.output.value}"}
    timeout: 5s
output: "${steps.add.output}"
"""
    )
    run = engine.start("calc", input={"value": 20})
    run_worker(reg)
    shown = engine.wait_for(run, timeout=WAIT)
    assert shown["status"] == "completed", shown
    assert shown["output"] == {"value": 41, "step": "add"}
    assert shown["steps"]["double"]["output"] == {"value": 40}


def test_a_non_retryable_error_fails_the_run_and_compensates(engine, reg, run_worker):
    """ActivityError(retryable=False) fails the step at once; completed steps are compensated, then failed."""
    released: list[dict[str, Any]] = []
    charges: list[int] = []

    @lockstep.activity("inventory.reserve", registry=reg)
    def reserve(payload: dict[str, Any]) -> dict[str, Any]:
        return {"reservation": f"res-{payload['order']}"}

    @lockstep.activity("inventory.release", registry=reg)
    def release(payload: dict[str, Any]) -> dict[str, Any]:
        released.append(payload)
        return {}

    @lockstep.activity("payment.charge", registry=reg)
    def charge(payload: dict[str, Any], ctx: ActivityContext) -> dict[str, Any]:
        charges.append(ctx.attempt)
        raise ActivityError("CardDeclined", "the card was declined", retryable=False)

    engine.publish(
        {
            "name": "order",
            "steps": [
                {
                    "id": "reserve",
                    "activity": "inventory.reserve",
                    "input": {"order": "${input.order}"},
                    "timeout": "5s",
                    "retry": RETRY,
                    "compensate": {
                        "activity": "inventory.release",
                        "input": {"reservation": "${steps.reserve.output.reservation}"},
                        "retry": RETRY,
                    },
                },
                {
                    "id": "charge",
                    "activity": "payment.charge",
                    "input": {"order": "${input.order}"},
                    "timeout": "5s",
                    "retry": RETRY,
                },
            ],
        }
    )
    run = engine.start("order", input={"order": 42})
    run_worker(reg)
    shown = engine.wait_for(run, timeout=WAIT)
    assert shown["status"] == "failed", shown
    assert shown["error"]["code"] == "CardDeclined"
    assert charges == [1]
    assert shown["steps"]["charge"]["status"] == "failed"
    assert shown["steps"]["reserve"]["status"] == "succeeded"
    assert shown["steps"]["reserve"]["compensation"]["status"] == "compensated"
    assert released == [{"reservation": "res-42"}]
    kinds = [e["type"] for e in engine.events(run)]
    assert (
        kinds.index("CompensationStarted") < kinds.index("CompensationScheduled") < kinds.index("RunFailed")
    )


def test_wait_for_polls_until_the_run_reaches_a_status(engine, reg, run_worker):
    """wait_for raises TimeoutError with the wait reason while a run waits, and returns once it ends."""
    started, gate = threading.Event(), threading.Event()

    @lockstep.activity("gate.pass", registry=reg)
    def pass_gate(payload: dict[str, Any]) -> dict[str, Any]:
        started.set()
        if not gate.wait(timeout=WAIT):
            raise ActivityError("GateClosed", retryable=False)
        return {"passed": True}

    engine.publish({"name": "gated", "steps": [{"id": "gate", "activity": "gate.pass", "timeout": "30s"}]})
    run = engine.start("gated")
    with pytest.raises(TimeoutError, match="still running") as info:
        engine.wait_for(run, timeout=0.1)  # nobody serves gate.pass yet
    assert "queued for a worker" in str(info.value)

    run_worker(reg)
    try:
        assert started.wait(timeout=WAIT)
        with pytest.raises(TimeoutError, match="is running on"):
            engine.wait_for(run, timeout=0.1)  # the activity is in flight, the run is not done
        assert engine.wait_for(run, ("running",), timeout=WAIT)["steps"]["gate"]["status"] == "running"
    finally:
        gate.set()
    shown = engine.wait_for(run, timeout=WAIT)
    assert shown["status"] == "completed"
    assert shown["output"] == {"passed": True}


def test_start_with_a_key_is_idempotent_through_the_engine(engine, reg):
    """Engine.start with the same key returns the same run id; runs() lists it once."""
    engine.publish({"name": "nap", "steps": [{"id": "nap", "wait": "1h"}]})
    a = engine.start("nap", key="once")
    b = engine.start("nap", key="once")
    assert a == b
    assert [r["run_id"] for r in engine.runs()] == [a]
    assert engine.show(a)["status"] == "waiting"
