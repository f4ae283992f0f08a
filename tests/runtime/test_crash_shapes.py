"""Crash and recovery of parallel and for-each runs with real `lockstep` worker processes, on both
backends: a worker SIGKILLed while several branches (or items) of one run are in flight, or in the
middle of committing a branch's result. Every branch and item completes once (one effect per
idempotency key downstream), the join is decided and ended once, and the history verifies."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from prockit import Cluster, Ledger, wait_until

from lockstep import Engine

pytestmark = pytest.mark.slow


def work(sid: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": sid,
        "activity": "test.step",
        "input": "${input}",
        "timeout": "30s",
        "retry": {"max_attempts": 5, "initial_interval": "100ms", "backoff": 1.0},
        **extra,
    }


PARALLEL = {
    "name": "fan",
    "steps": [
        {"id": "fan", "parallel": {"branches": {b: [work(f"do-{b}")] for b in ("a", "b", "c")}}},
        {**work("after"), "input": {}},  # never blocked
    ],
}
LINES = {
    "name": "lines",
    "steps": [
        {
            "id": "lines",
            "for_each": {
                "items": "${input.lines}",
                "concurrency": 2,
                "max_items": 10,
                "body": [{**work("line"), "input": {"sku": "${item}", "sleep_ms": 150}}],
            },
        }
    ],
}


def types(engine: Engine, run_id: str) -> list[str]:
    return [e["type"] for e in engine.events(run_id)]


def once_each(ledger: Ledger, run_id: str, steps: set[str]) -> None:
    """Each step's effect was applied once downstream (its retries replayed the saved effect)."""
    per_step = Counter(e["step"] for e in ledger.effects(run_id))
    assert set(per_step) == steps
    assert set(per_step.values()) == {1}


def verify_ok(cluster: Cluster) -> None:
    report = json.loads(cluster.cli("verify", "--json").stdout)
    assert report["ok"], report["problems"]


def test_sigkill_with_three_branches_in_flight_completes_each_once_and_joins_once(
    cluster: Cluster, engine: Engine, ledger: Ledger
) -> None:
    """All three branches' first attempts run on w1 (blocked); w1 is SIGKILLed; w2 retries each one
    after its lease expires, and the parallel step joins exactly once."""
    engine.publish(PARALLEL)
    w1 = cluster.worker("w1", concurrency=4)
    run = engine.start("fan", input={"block_attempt": 1})
    wait_until(lambda: len(ledger.calls(run)) == 3, 20, "the three branches to start on w1")
    assert {c["pid"] for c in ledger.calls(run)} == {w1.pid}
    w1.kill()
    cluster.worker("w2", concurrency=4)
    shown = engine.wait_for(run, ("completed", "failed"), timeout=40)
    assert shown["status"] == "completed", json.dumps(shown, indent=2)
    once_each(ledger, run, {"fan.a.do-a", "fan.b.do-b", "fan.c.do-c", "after"})
    seen = types(engine, run)
    assert seen.count("JoinDecided") == 1
    assert seen.count("StepJoined") == 1
    assert seen.count("ActivityTimedOut") == 3  # each branch's lost attempt, once
    verify_ok(cluster)


def test_sigkill_in_a_for_each_keeps_its_concurrency_and_finishes_every_item_once(
    cluster: Cluster, engine: Engine, ledger: Ledger
) -> None:
    """Five items two at a time; the worker dies while two are in flight; a new one finishes them, never
    more than two items at once, each item's effect once, the output in item order."""
    engine.publish(LINES)
    w1 = cluster.worker("w1", concurrency=4)
    run = engine.start("lines", input={"lines": ["a", "b", "c", "d", "e"]})
    wait_until(lambda: len(ledger.calls(run)) >= 3, 20, "the third item to start")
    w1.kill()
    cluster.worker("w2", concurrency=4)
    shown = engine.wait_for(run, ("completed", "failed"), timeout=40)
    assert shown["status"] == "completed", json.dumps(shown, indent=2)
    once_each(ledger, run, {f"lines[{i}].line" for i in range(5)})
    assert [x["attempt"] >= 1 for x in shown["steps"]["lines"]["output"]] == [True] * 5
    open_lanes, most = 0, 0
    for e in engine.events(run):
        open_lanes += {"LaneStarted": 1, "LaneFinished": -1}.get(e["type"], 0)
        most = max(most, open_lanes)
    assert most == 2
    assert types(engine, run).count("StepJoined") == 1
    verify_ok(cluster)


def test_a_worker_killed_while_committing_a_branch_result_leaves_one_join(
    cluster: Cluster, engine: Engine, ledger: Ledger
) -> None:
    """w1 dies inside the transaction recording a branch's success (written, not committed): the
    branch is retried with the same key (the effect replayed, not repeated) and the step joins once."""
    engine.publish(PARALLEL)
    w1 = cluster.worker("w1", concurrency=4, faults="commit.ReportSuccess=kill@2", wait=False)
    run = engine.start("fan", input={})
    wait_until(lambda: not w1.alive(), 20, "w1 to die committing its second result")
    cluster.worker("w2", concurrency=4)
    shown = engine.wait_for(run, ("completed", "failed"), timeout=40)
    assert shown["status"] == "completed", json.dumps(shown, indent=2)
    once_each(ledger, run, {"fan.a.do-a", "fan.b.do-b", "fan.c.do-c", "after"})
    replayed = [c for c in ledger.calls(run) if c["applied"] == 0]
    assert replayed  # the killed commit's branch ran again and got its saved effect
    seen = types(engine, run)
    assert seen.count("JoinDecided") == 1
    assert seen.count("StepJoined") == 1
    verify_ok(cluster)


CHILD = {"name": "kyc", "steps": [{**work("look"), "input": {"who": "${input.who}"}}]}
PARENT = {
    "name": "onboard",
    "steps": [
        {"id": "kyc", "run": {"definition": "kyc", "input": {"who": "${input.who}"}}},
        {**work("welcome"), "input": {"kyc": "${steps.kyc.output.attempt}"}},
    ],
}


@pytest.mark.parametrize("point", ["commit.StartRun", "commit.ChildEnded"])
def test_a_scheduler_killed_around_a_child_run_starts_one_child_and_resumes_the_parent_once(
    cluster: Cluster, engine: Engine, ledger: Ledger, point: str
) -> None:
    """The scheduler dies inside the transaction that starts the child, or that hands the child's end to
    the parent (written, not committed); a new scheduler redoes it: one child run (its start key), one
    ChildRunEnded on the parent, the parent's next step once."""
    engine.publish(CHILD)
    engine.publish(PARENT)
    cluster.worker("w1", scheduler=False)
    s1 = cluster.scheduler("s1", faults=f"{point}=kill@1", wait=False)
    run = engine.start("onboard", input={"who": "ada"})
    wait_until(lambda: not s1.alive(), 30, f"s1 to die at {point}")
    cluster.scheduler("s2")
    shown = engine.wait_for(run, ("completed", "failed"), timeout=40)
    assert shown["status"] == "completed", json.dumps(shown, indent=2)
    seen = types(engine, run)
    assert seen.count("ChildRunRequested") == 1
    assert seen.count("ChildRunEnded") == 1
    with engine.service.read() as tx:
        runs = tx.run_ids("default")
    assert len(runs) == 2  # the parent and one child
    (child,) = [r for r in runs if r != run]
    assert engine.show(child)["status"] == "completed"
    once_each(ledger, run, {"welcome"})
    once_each(ledger, child, {"look"})
    verify_ok(cluster)
