"""Child runs (`run` steps) end to end on both backends, with a real in-process worker and scheduler:
the parent starts a child of another definition of its own tenant (never another tenant's), waits
without holding anything, takes the child's output; a failing child fails the parent's step; cancelling
the parent cancels the child first; the nesting is bounded; the child's trace joins the parent's."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

import lockstep
from lockstep import ActivityContext, ActivityError, Engine, Registry
from lockstep.app.tracing import parse_traceparent, run_trace
from lockstep.errors import NotFound
from lockstep.runtime.worker import Worker

WAIT = 30.0

CHILD = {
    "name": "kyc-check",
    "steps": [
        {"id": "look", "activity": "kyc.look", "input": {"who": "${input.customer}"}, "timeout": "10s"}
    ],
}
PARENT = {
    "name": "onboarding",
    "steps": [
        {"id": "open", "activity": "acct.open", "timeout": "10s", "compensate": {"activity": "acct.close"}},
        {"id": "kyc", "run": {"definition": "kyc-check", "input": {"customer": "${input.customer}"}}},
        {
            "id": "welcome",
            "activity": "acct.welcome",
            "timeout": "10s",
            "input": {"kyc": "${steps.kyc.output}"},
        },
    ],
}


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
        w = engine.worker(registry, lease_ttl=timedelta(seconds=2), poll_interval=timedelta(milliseconds=20))
        started.append(w.start())
        return w

    try:
        yield start
    finally:
        for w in started:
            w.stop(timeout=10)


def registry(look: Callable[[dict[str, Any], ActivityContext], Any]) -> tuple[Registry, list[str]]:
    reg = Registry()
    closed: list[str] = []
    lockstep.activity("kyc.look", registry=reg)(look)

    @lockstep.activity("acct.open", registry=reg)
    def open_(payload: Any, ctx: ActivityContext) -> dict[str, Any]:
        return {"account": 1}

    @lockstep.activity("acct.close", registry=reg)
    def close(payload: Any, ctx: ActivityContext) -> dict[str, Any]:
        closed.append(ctx.run_id)
        return {}

    @lockstep.activity("acct.welcome", registry=reg)
    def welcome(payload: Any, ctx: ActivityContext) -> Any:
        return payload

    return reg, closed


def child_of(engine: Engine, run: str) -> str:
    """The child the parent requested, once the scheduler's children pass has started it."""
    (requested,) = [e["data"] for e in engine.events(run) if e["type"] == "ChildRunRequested"]
    child = str(requested["child_run_id"])
    deadline = time.monotonic() + WAIT
    while True:
        try:
            engine.show(child)
            return child
        except NotFound:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def test_a_parent_takes_its_childs_output(engine: Engine, run_worker: Any) -> None:
    """The child runs kyc-check (latest) with the rendered input; its output is the step's output; the
    child knows its parent, its start key is <parent>:kyc, and its trace is the parent's."""
    reg, _ = registry(lambda payload, ctx: {"clear": True, "who": payload["who"]})
    engine.publish(CHILD)
    engine.publish(PARENT)
    run_worker(reg)
    run = engine.start("onboarding", input={"customer": "c-9"})
    shown = engine.wait_for(run, ("completed", "failed"), timeout=WAIT)
    assert shown["status"] == "completed", json.dumps(shown, indent=2)
    assert shown["output"] == {"kyc": {"clear": True, "who": "c-9"}}
    child = child_of(engine, run)
    started = engine.events(child)[0]["data"]
    assert started["parent"] == {"run_id": run, "step": "kyc", "depth": 1}
    assert started["start_key"] == f"{run}:kyc"
    assert engine.show(child)["status"] == "completed"
    # The child's trace is the parent's: its root's parent is the parent's kyc step span.
    parent_state = engine.service.state(None, run)
    trace = run_trace(parent_state)
    ref = parse_traceparent(started["trace"])
    assert ref is not None
    assert ref.trace_id == trace.trace_id
    assert started["trace_parent"] == f"{trace.span('step', parent_state.steps['kyc'].entered_seq):016x}"
    assert all(r["ok"] for r in engine.verify())


def test_a_failed_child_fails_the_parents_step_and_the_parent_compensates(
    engine: Engine, run_worker: Any
) -> None:
    """The child's failure is the step's (ChildRunFailed, quoting the child's error)."""

    def look(payload: Any, ctx: ActivityContext) -> Any:
        raise ActivityError("Sanctioned", "on a list", retryable=False)

    reg, closed = registry(look)
    engine.publish(CHILD)
    engine.publish(PARENT)
    run_worker(reg)
    run = engine.start("onboarding", input={"customer": "c-1"})
    shown = engine.wait_for(run, ("completed", "failed"), timeout=WAIT)
    assert shown["status"] == "failed"
    assert shown["error"]["code"] == "ChildRunFailed"
    assert "Sanctioned" in shown["error"]["message"]
    assert closed == [run]


def test_cancelling_the_parent_cancels_the_child_first(engine: Engine, run_worker: Any) -> None:
    """The parent's cancel reaches the child (CancelRun by the scheduler); the parent ends cancelled
    only after the child did, and compensates its own steps."""
    gate: list[bool] = []

    def look(payload: Any, ctx: ActivityContext) -> Any:
        deadline = time.monotonic() + 4 * WAIT  # never outlive the test (the worker's stop waits for it)
        while not gate and time.monotonic() < deadline:
            ctx.heartbeat()
            time.sleep(0.02)
        return {"late": True}

    reg, closed = registry(look)
    engine.publish(CHILD)
    engine.publish(PARENT)
    run_worker(reg)
    run = engine.start("onboarding", input={"customer": "c-2"})
    try:
        engine.wait_for(run, ("waiting",), timeout=WAIT)
        child = child_of(engine, run)
        engine.wait_for(child, ("running",), timeout=WAIT)
        engine.cancel(run, reason="customer left")
        engine.wait_for(child, ("cancelling",), timeout=WAIT)
        assert engine.show(run)["status"] == "cancelling"
    finally:
        gate.append(True)
    assert engine.wait_for(child, ("cancelled",), timeout=WAIT)["status"] == "cancelled"
    assert engine.wait_for(run, ("cancelled",), timeout=WAIT)["status"] == "cancelled"
    assert closed == [run]


def test_attack_a_run_step_never_starts_another_tenants_definition(engine: Engine, run_worker: Any) -> None:
    """Tenant mallory's step names kyc-check, published only in tenant victim: the child is looked up
    in mallory's tenant alone, so it is not started (ChildNotStarted) and victim has no run at all."""
    svc = engine.service
    svc.principals.create_tenant("victim")
    svc.principals.create_tenant("mallory")
    engine.publish(CHILD, tenant="victim")
    engine.publish(PARENT, tenant="mallory")
    reg, _ = registry(lambda payload, ctx: {"stolen": True})
    run_worker(reg)
    run = engine.start("onboarding", input={"customer": "c-3"}, tenant="mallory")
    shown = engine.wait_for(run, ("completed", "failed"), timeout=WAIT, tenant="mallory")
    assert shown["status"] == "failed"
    (ended,) = [e["data"] for e in engine.events(run, tenant="mallory") if e["type"] == "ChildRunEnded"]
    assert ended["error"]["code"] == "ChildNotStarted"
    assert "in tenant mallory" in ended["error"]["message"]
    with svc.read() as tx:
        assert tx.run_ids("victim") == []


def test_children_nest_only_as_deep_as_the_tenant_allows(engine: Engine, run_worker: Any) -> None:
    """A definition that runs itself stops at max_child_depth: the deepest parent's step fails with
    ChildDepthExceeded, and every run above it fails in turn."""
    svc = engine.service
    svc.principals.create_tenant("default")
    with svc.write() as tx:
        tx.update_tenant_settings("default", {"max_child_depth": 2})
    engine.publish({"name": "again", "steps": [{"id": "deeper", "run": {"definition": "again"}}]})
    reg, _ = registry(lambda payload, ctx: {})
    run_worker(reg)
    top = engine.start("again", input={})
    shown = engine.wait_for(top, ("completed", "failed"), timeout=WAIT)
    assert shown["status"] == "failed"
    with svc.read() as tx:
        assert len(tx.run_ids("default")) == 3  # the top run and two levels of children
    deepest = [s for s in (engine.show(r) for r in _all(engine)) if s["steps"]["deeper"]["error"]]
    codes = {s["steps"]["deeper"]["error"]["code"] for s in deepest}
    assert "ChildDepthExceeded" in codes


def _all(engine: Engine) -> list[str]:
    with engine.service.read() as tx:
        return list(tx.run_ids("default"))
