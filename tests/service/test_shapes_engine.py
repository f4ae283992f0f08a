"""Parallel and for-each runs with real in-process workers on both backends: branches and items run at
the same time on several worker slots, every activity runs once per lane, and the join waits for the
slowest one; compensation runs across branches after a failure."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import yaml

import lockstep
from lockstep import ActivityContext, ActivityError, Engine, Registry
from lockstep.runtime.worker import Worker

WAIT = 20.0

FANOUT = yaml.safe_load(
    """
name: fanout
steps:
  - id: both
    parallel:
      branches:
        slow:
          - {id: slow, activity: t.slow, timeout: 10s, compensate: {activity: t.undo}}
        fast:
          - {id: fast, activity: t.fast, timeout: 10s, compensate: {activity: t.undo}}
  - id: lines
    for_each:
      items: "${input.lines}"
      concurrency: 3
      max_items: 20
      body:
        - {id: pack, activity: t.pack, timeout: 10s, input: {sku: "${item}"}, compensate: {activity: t.undo}}
  - id: last
    activity: t.last
    timeout: 10s
    retry: {max_attempts: 1}
"""
)


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    e = Engine.open(db_url)
    try:
        yield e
    finally:
        e.close()


@pytest.fixture
def run_worker(engine: Engine) -> Iterator[Callable[[Registry], Worker]]:
    started: list[Worker] = []

    def start(registry: Registry) -> Worker:
        w = engine.worker(registry, lease_ttl=timedelta(seconds=2), concurrency=4).start()
        started.append(w)
        return w

    try:
        yield start
    finally:
        for w in started:
            w.stop(timeout=10)


def _activities(fail_last: bool) -> tuple[Registry, Counter[str], list[str], dict[str, int]]:
    """The activities, the calls per (activity, idempotency key), the compensations run, and how many
    activities ran at once at most."""
    reg = Registry()
    calls: Counter[str] = Counter()
    undone: list[str] = []
    at_once = {"now": 0, "most": 0}
    lock = threading.Lock()

    def busy(name: str, ctx: ActivityContext, seconds: float) -> None:
        with lock:
            calls[f"{name}:{ctx.idempotency_key}"] += 1
            at_once["now"] += 1
            at_once["most"] = max(at_once["most"], at_once["now"])
        time.sleep(seconds)
        with lock:
            at_once["now"] -= 1

    @lockstep.activity("t.slow", registry=reg)
    def slow(payload: dict[str, Any], ctx: ActivityContext) -> dict[str, Any]:
        busy("slow", ctx, 0.3)
        return {"slow": True}

    @lockstep.activity("t.fast", registry=reg)
    def fast(payload: dict[str, Any], ctx: ActivityContext) -> dict[str, Any]:
        busy("fast", ctx, 0.05)
        return {"fast": True}

    @lockstep.activity("t.pack", registry=reg)
    def pack(payload: dict[str, Any], ctx: ActivityContext) -> dict[str, Any]:
        busy("pack", ctx, 0.1)
        return {"packed": payload["sku"]}

    @lockstep.activity("t.last", registry=reg)
    def last(payload: dict[str, Any], ctx: ActivityContext) -> dict[str, Any]:
        if fail_last:
            raise ActivityError("NoCarrier", "no carrier", retryable=False)
        return {"done": True}

    @lockstep.activity("t.undo", registry=reg)
    def undo(payload: dict[str, Any], ctx: ActivityContext) -> dict[str, Any]:
        with lock:
            undone.append(ctx.idempotency_key)
        return {}

    return reg, calls, undone, at_once


def test_branches_and_items_run_side_by_side_once_each(engine: Engine, run_worker: Any) -> None:
    """Both branches run at the same time, then the items three at a time; each activity runs exactly
    once per lane, and the run's output is the last step's."""
    reg, calls, _, at_once = _activities(fail_last=False)
    engine.publish(FANOUT)
    run_worker(reg)
    run = engine.start("fanout", input={"lines": [f"s{i}" for i in range(7)]})
    shown = engine.wait_for(run, ("completed", "failed"), timeout=WAIT)
    assert shown["status"] == "completed"
    assert shown["steps"]["lines"]["output"] == [{"packed": f"s{i}"} for i in range(7)]
    assert len(calls) == 9
    assert set(calls.values()) == {1}
    assert 2 <= at_once["most"] <= 4
    assert all(r["ok"] for r in engine.verify(run))


def test_a_failure_after_the_shapes_compensates_every_lane(engine: Engine, run_worker: Any) -> None:
    """The last step fails: every item's and every branch's completed step is undone, once."""
    reg, _, undone, _ = _activities(fail_last=True)
    engine.publish(FANOUT)
    run_worker(reg)
    run = engine.start("fanout", input={"lines": ["a", "b", "c"]})
    shown = engine.wait_for(run, ("failed", "completed"), timeout=WAIT)
    assert shown["status"] == "failed"
    assert len(undone) == 5
    assert len(set(undone)) == 5
    assert all(r["ok"] for r in engine.verify(run))
