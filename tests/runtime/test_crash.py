"""Crash and recovery with real `lockstep` worker and scheduler processes on one database, each test
on both backends (a SQLite file, a PostgreSQL database: the `backend` fixture in conftest.py).

Each test drives real subprocesses (SIGKILL, SIGTERM, SIGSTOP/SIGCONT), synchronises only by polling
the database or the downstream ledger with a deadline, and checks the history, the ledger (effects once
per idempotency key) and `lockstep verify`.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import time
from collections import Counter
from typing import Any

import pytest
from prockit import Cluster, Ledger, wait_until

from lab.fleet import free_port
from lockstep import Engine
from lockstep.core.timeutil import parse_iso

pytestmark = pytest.mark.slow

LEASE_S = 1.0  # every worker here runs with --lease-ttl 1s


def one_step(name: str, *, delivery: str = "idempotent", max_attempts: int = 3) -> dict[str, Any]:
    """A definition whose only step runs test.step with the run input, keyed by input.order."""
    return {
        "name": name,
        "steps": [
            {
                "id": "work",
                "activity": "test.step",
                "input": "${input}",
                "timeout": "30s",
                "delivery": delivery,
                "retry": {"max_attempts": max_attempts, "initial_interval": "100ms", "backoff": 1.0},
                "idempotency_key": "work-${input.order}",
            }
        ],
    }


def events(engine: Engine, run_id: str, *types: str) -> list[dict[str, Any]]:
    return [e for e in engine.events(run_id) if not types or e["type"] in types]


def attempts(engine: Engine, run_id: str, type_: str) -> list[int]:
    return [e["attempt"] for e in events(engine, run_id, type_)]


def finish(engine: Engine, run_id: str, status: str, timeout: float = 30) -> dict[str, Any]:
    shown = engine.wait_for(run_id, timeout=timeout)
    assert shown["status"] == status, json.dumps(shown, indent=2)
    return shown


def verify_ok(cluster: Cluster) -> None:
    report = json.loads(cluster.cli("verify", "--json").stdout)
    assert report["ok"], report["problems"]


def test_sigkill_mid_activity_then_a_new_worker_completes_the_run(
    cluster: Cluster, engine: Engine, ledger: Ledger
) -> None:
    """A worker SIGKILLed mid-activity times out attempt 1; a worker started later succeeds on attempt 2."""
    engine.publish(one_step("crash-mid"))
    w1 = cluster.worker("w1")
    run = engine.start("crash-mid", input={"order": "a1", "block_attempt": 1})
    first = wait_until(lambda: ledger.started(run, 1), 20, "attempt 1 to start on w1")
    assert first["pid"] == w1.pid

    assert w1.kill() == -signal.SIGKILL
    w2 = cluster.worker("w2")
    shown = finish(engine, run, "completed")

    assert shown["output"]["pid"] == w2.pid
    assert shown["steps"]["work"]["attempts"] == 2
    timed_out = events(engine, run, "ActivityTimedOut")
    assert [(e["step"], e["attempt"]) for e in timed_out] == [("work", 1)]
    assert timed_out[0]["data"]["will_retry"] is True
    assert "w1" in timed_out[0]["data"]["reason"]
    assert attempts(engine, run, "ActivitySucceeded") == [2]
    assert [(e["attempt"], e["data"]["worker"]) for e in events(engine, run, "ActivityStarted")] == [
        (1, "w1"),
        (2, "w2"),
    ]
    assert [(c["attempt"], c["pid"], c["applied"]) for c in ledger.calls(run)] == [
        (1, w1.pid, None),
        (2, w2.pid, 1),
    ]
    verify_ok(cluster)


def test_a_worker_restarted_under_its_id_retries_its_predecessors_attempt_at_once(
    cluster: Cluster, engine: Engine, ledger: Ledger
) -> None:
    """With a 60 s lease, a worker SIGKILLed mid-activity and restarted under the same --worker-id
    abandons the dead lease at start-up: attempt 2 runs within seconds, not after the minute."""
    engine.publish(one_step("crash-restart"))
    w1 = cluster.worker("w1", lease_ttl="60s")
    run = engine.start("crash-restart", input={"order": "r1", "block_attempt": 1})
    wait_until(lambda: ledger.started(run, 1), 20, "attempt 1 to start on w1")
    assert w1.kill() == -signal.SIGKILL

    restarted = time.monotonic()
    again = cluster.worker("w1", lease_ttl="60s")
    shown = finish(engine, run, "completed", timeout=30)
    assert time.monotonic() - restarted < 30  # well under the 60 s lease
    assert shown["output"]["pid"] == again.pid
    assert [(e["attempt"], e["data"]["worker"]) for e in events(engine, run, "ActivityStarted")] == [
        (1, "w1"),
        (2, "w1"),
    ]
    assert "abandoned 1 lease(s) of a previous w1" in again.log()
    assert [(e["idempotency_key"], e["attempt"]) for e in ledger.effects(run)] == [("work-r1", 2)]


def test_lost_response_is_retried_with_the_same_key_and_applied_once(
    cluster: Cluster, engine: Engine, ledger: Ledger
) -> None:
    """Effect applied, worker dies before reporting: the retry reuses the key; one effect, two calls."""
    engine.publish(one_step("lost-response"))
    w1 = cluster.worker("w1")
    run = engine.start("lost-response", input={"order": "b1", "crash_after_effect_attempt": 1})
    assert w1.wait(20) == -signal.SIGKILL  # the activity killed its own worker after the effect
    assert [(c["attempt"], c["applied"]) for c in ledger.calls(run)] == [(1, 1)]

    cluster.worker("w2")
    shown = finish(engine, run, "completed")

    assert shown["output"]["replayed"] is True  # the ledger returned the saved effect
    keys = [e["data"]["idempotency_key"] for e in events(engine, run, "ActivityScheduled")]
    assert keys == ["work-b1", "work-b1"]
    assert attempts(engine, run, "ActivityTimedOut") == [1]
    assert attempts(engine, run, "ActivitySucceeded") == [2]
    calls = ledger.calls(run)
    assert [(c["attempt"], c["idempotency_key"], c["applied"]) for c in calls] == [
        (1, "work-b1", 1),
        (2, "work-b1", 0),
    ]
    assert [(e["idempotency_key"], e["attempt"]) for e in ledger.effects(run)] == [("work-b1", 1)]
    verify_ok(cluster)


def test_lost_response_at_most_once_needs_attention_and_is_never_retried(
    cluster: Cluster, engine: Engine, ledger: Ledger
) -> None:
    """at_most_once: a worker lost after the effect leaves needs_attention/outcome_unknown, one call."""
    engine.publish(one_step("at-most-once", delivery="at_most_once"))
    w1 = cluster.worker("w1")
    run = engine.start("at-most-once", input={"order": "c1", "crash_after_effect_attempt": 1})
    assert w1.wait(20) == -signal.SIGKILL

    cluster.worker("w2")  # serves test.step and expires leases: it would retry if anything asked it to
    finish(engine, run, "needs_attention")
    shown = cluster.cli_json("show", run, "--json")
    assert shown["status"] == "needs_attention"
    assert shown["attention"]["code"] == "outcome_unknown"
    assert shown["attention"]["step"] == "work"
    assert shown["wait_reason"]
    assert shown["next_action"]
    timed_out = events(engine, run, "ActivityTimedOut")
    assert [(e["attempt"], e["data"]["will_retry"], e["data"]["outcome_unknown"]) for e in timed_out] == [
        (1, False, True)
    ]

    # Absence of a retry can only be observed for a while: watch ~2.5 lease periods.
    deadline = time.monotonic() + 2.5 * LEASE_S
    while time.monotonic() < deadline:
        assert len(ledger.calls(run)) == 1
        assert attempts(engine, run, "ActivityScheduled") == [1]
        assert engine.show(run)["status"] == "needs_attention"
        time.sleep(0.1)
    assert len(ledger.effects(run)) == 1
    verify_ok(cluster)


def test_sigterm_drains_the_running_activity_and_exits_zero(
    cluster: Cluster, engine: Engine, ledger: Ledger
) -> None:
    """SIGTERM during a 1s activity: the activity finishes, that worker reports ActivitySucceeded, exit 0."""
    engine.publish(one_step("drain"))
    w1 = cluster.worker("drainer")
    run = engine.start("drain", input={"order": "d1", "sleep_ms": 1000})
    wait_until(lambda: ledger.started(run, 1), 20, "the activity to start")

    w1.signal(signal.SIGTERM)
    assert w1.wait(60) == 0  # generous: see test_draining_worker_renews_its_lease_at_the_normal_pace
    assert "received SIGTERM" in w1.log()

    shown = engine.show(run)  # reported before the process exited: no other process is running
    assert shown["status"] == "completed"
    assert shown["output"]["pid"] == w1.pid
    started = events(engine, run, "ActivityStarted")
    succeeded = events(engine, run, "ActivitySucceeded")
    assert [(e["attempt"], e["data"]["worker"]) for e in started] == [(1, "drainer")]
    assert [(e["attempt"], e["data"]["fencing"]) for e in succeeded] == [(1, started[0]["data"]["fencing"])]
    assert not events(engine, run, "ActivityTimedOut", "ActivityFailed", "ResultIgnored")
    assert [(c["finished"], c["applied"]) for c in ledger.calls(run)] == [(1, 1)]
    verify_ok(cluster)


def test_serve_sigterm_drains_its_in_process_worker_and_exits_zero(
    cluster: Cluster, engine: Engine, ledger: Ledger
) -> None:
    """`serve --activities` SIGTERMed during a 1s activity: the activity finishes and is reported by
    serve's own worker, serve exits 0 (uvicorn's re-raised signal does not cut its shutdown short)."""
    engine.publish(one_step("serve-drain"))
    port = free_port()
    server = cluster.spawn("serve", ["serve", "--port", str(port), "--activities", cluster.activities])
    cluster.wait_ready(server, "lockstep serving on", timeout=120)  # a loaded machine starts slowly
    run = engine.start("serve-drain", input={"order": "s1", "sleep_ms": 1000})
    wait_until(lambda: ledger.started(run, 1), 60, "the activity to start in serve's worker")

    server.signal(signal.SIGTERM)
    assert server.wait(60) == 0, server.log()
    assert "received SIGTERM" in server.log()
    shown = engine.show(run)  # reported before serve exited: no other process is running
    assert shown["status"] == "completed"
    assert not events(engine, run, "ActivityTimedOut", "ActivityFailed", "ResultIgnored")
    assert [(c["finished"], c["applied"]) for c in ledger.calls(run)] == [(1, 1)]


def _tgkill(pid: int, tid: int, sig: signal.Signals) -> None:
    """Send `sig` to one thread of `pid` (Linux tgkill: a signal the kernel may not redirect)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(234, pid, tid, int(sig)) != 0:  # 234: SYS_tgkill on x86-64
        raise OSError(ctypes.get_errno(), f"tgkill({pid}, {tid}, {sig.name})")


def test_sigterm_received_by_a_thread_other_than_main_still_drains(
    cluster: Cluster, engine: Engine, ledger: Ledger
) -> None:
    """SIGTERM that the kernel hands to one of the worker's other threads (it may pick any) still drains
    the worker and exits 0: the main thread does not sleep through it in an untimed wait."""
    engine.publish(one_step("drain-thread"))
    w1 = cluster.worker("drainer")
    run = engine.start("drain-thread", input={"order": "t1", "sleep_ms": 1000})
    wait_until(lambda: ledger.started(run, 1), 20, "the activity to start")
    others = sorted(int(t) for t in os.listdir(f"/proc/{w1.pid}/task") if int(t) != w1.pid)
    assert others, "the worker runs no thread besides its main one"
    _tgkill(w1.pid, others[-1], signal.SIGTERM)
    assert w1.wait(60) == 0, w1.log()
    assert "received SIGTERM" in w1.log()
    assert engine.show(run)["status"] == "completed"
    assert [(c["finished"], c["applied"]) for c in ledger.calls(run)] == [(1, 1)]


# A trigger counts every lease renewal (an UPDATE of tasks.lease_expires_at) into test_renewals.
COUNT_RENEWALS = {
    "sqlite": [
        "CREATE TABLE test_renewals (task_id TEXT)",
        "CREATE TRIGGER test_count_renewals AFTER UPDATE OF lease_expires_at ON tasks "
        "BEGIN INSERT INTO test_renewals VALUES (NEW.task_id); END",
    ],
    "postgresql": [
        "CREATE TABLE test_renewals (task_id TEXT)",
        "CREATE FUNCTION test_count_renewal() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN INSERT INTO test_renewals VALUES (NEW.task_id); RETURN NULL; END $$",
        "CREATE TRIGGER test_count_renewals AFTER UPDATE OF lease_expires_at ON tasks "
        "FOR EACH ROW EXECUTE FUNCTION test_count_renewal()",
    ],
}


def test_draining_worker_renews_its_lease_at_the_normal_pace(
    cluster: Cluster, engine: Engine, ledger: Ledger
) -> None:
    """While draining after SIGTERM a worker renews its lease about every ttl/3, not in a busy loop."""
    for statement in COUNT_RENEWALS[cluster.backend]:
        cluster.sql(statement)

    def renewals() -> int:
        return int(cluster.sql("SELECT COUNT(*) FROM test_renewals")[0][0])

    engine.publish(one_step("drain-pace"))
    w1 = cluster.worker("drainer")
    run = engine.start("drain-pace", input={"order": "p1", "sleep_ms": 1000})
    wait_until(lambda: ledger.started(run, 1), 20, "the activity to start")
    at_sigterm = renewals()
    w1.signal(signal.SIGTERM)
    assert w1.wait(60) == 0
    during_drain = renewals() - at_sigterm
    assert renewals() >= 1, "the trigger counted no lease update at all"
    assert engine.show(run)["status"] == "completed"
    # A ~1s drain with a 1s lease renewed every ~333ms needs about 3 renewals; allow generous slack.
    assert during_drain <= 10, f"{during_drain} lease renewals while draining a 1s activity"


def test_killed_scheduler_timer_is_fired_once_by_new_schedulers(cluster: Cluster, engine: Engine) -> None:
    """A durable timer pending when its scheduler is SIGKILLed is fired exactly once by new schedulers."""
    engine.publish({"name": "nap", "steps": [{"id": "nap", "wait": "1s"}]})
    s1 = cluster.scheduler("s1")
    run = engine.start("nap")
    assert engine.show(run)["status"] == "waiting"
    assert s1.kill() == -signal.SIGKILL
    assert not events(engine, run, "TimerFired"), "s1 fired the 1s timer before it was killed"

    # Two schedulers race for the recovered timer; the conditional claim lets only one fire it.
    s2 = cluster.scheduler("s2", wait=False)
    s3 = cluster.scheduler("s3", wait=False)
    cluster.wait_ready(s2, "scheduler running")
    cluster.wait_ready(s3, "scheduler running")
    finish(engine, run, "completed")

    scheduled = events(engine, run, "TimerScheduled")
    fired = events(engine, run, "TimerFired")
    assert len(scheduled) == 1
    assert len(fired) == 1
    assert fired[0]["data"]["generation"] == scheduled[0]["data"]["generation"]
    assert parse_iso(fired[0]["at"]) >= parse_iso(scheduled[0]["data"]["fire_at"])
    verify_ok(cluster)


def test_one_unreadable_run_does_not_stop_the_scheduler_for_the_others(
    cluster: Cluster, engine: Engine
) -> None:
    """A run whose stored snapshot cannot be read does not stop a scheduler from firing other runs' timers."""
    engine.publish({"name": "short-nap", "steps": [{"id": "nap", "wait": "200ms"}]})
    poisoned = engine.start("short-nap")
    healthy = engine.start("short-nap")
    cluster.sql("UPDATE runs SET snapshot = 'not json' WHERE run_id = ?", (poisoned,))
    s1 = cluster.scheduler("s1")

    wait_until(
        # not "Traceback" in the log: the scheduler logs the skipped run's error with its traceback
        lambda: engine.show(healthy)["status"] == "completed" or not s1.alive(),
        20,
        "the healthy run to complete (or the scheduler to exit)",
    )
    assert engine.show(healthy)["status"] == "completed", s1.log()
    assert s1.alive()


def pipeline() -> dict[str, Any]:
    """Three activity steps; the middle one fails `input.fail` times before it succeeds."""

    def step(sid: str, extra: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": sid,
            "activity": "test.step",
            "input": {"order": "${input.n}", **extra},
            "timeout": "30s",
            "retry": {"max_attempts": 4, "initial_interval": "100ms", "backoff": 1.0},
            "idempotency_key": f"{sid}-${{input.n}}",
        }

    return {
        "name": "pipeline",
        "steps": [step("a", {}), step("b", {"fail_attempts": "${input.fail}"}), step("c", {})],
    }


def test_two_workers_two_schedulers_thirty_runs_all_complete_once(
    cluster: Cluster, engine: Engine, ledger: Ledger
) -> None:
    """2 workers + 2 schedulers, 30 runs with a flaky step: all complete, no duplicate success, one effect;
    every attempt of the flaky step before its success failed or lost its lease."""
    engine.publish(pipeline())
    procs = [
        cluster.worker("w1", scheduler=False, wait=False),
        cluster.worker("w2", scheduler=False, wait=False),
        cluster.scheduler("s1", wait=False),
        cluster.scheduler("s2", wait=False),
    ]
    for p in procs:
        cluster.wait_ready(p, "scheduler running" if p.name.startswith("s") else "serving")
    runs = {engine.start("pipeline", input={"n": n, "fail": n % 3}): n for n in range(30)}

    def all_done() -> bool:
        return all(s["status"] == "completed" for s in engine.runs(status="completed", limit=100)) and (
            len(engine.runs(status="completed", limit=100)) == len(runs)
        )

    wait_until(all_done, 60, "all 30 runs to complete", interval=0.1)

    for run, n in runs.items():
        succeeded = Counter((e["step"], e["attempt"]) for e in events(engine, run, "ActivitySucceeded"))
        assert all(c == 1 for c in succeeded.values()), (run, succeeded)
        assert sorted(step for step, _ in succeeded) == ["a", "b", "c"]
        # b fails its first n % 3 attempts. A worker starved past its 1s lease (a loaded machine) loses an
        # attempt to ActivityTimedOut instead, and its late result is ignored: that attempt then counts
        # towards the failures the step needs before it succeeds.
        ended = Counter(
            e["type"] for e in events(engine, run, "ActivityFailed", "ActivityTimedOut") if e["step"] == "b"
        )
        (b_success,) = [attempt for step, attempt in succeeded if step == "b"]
        assert b_success == ended.total() + 1, (run, ended, b_success)
        assert b_success > n % 3, (run, ended, b_success)
        assert ended["ActivityFailed"] <= n % 3, (run, ended)
        fired = Counter(e["data"]["generation"] for e in events(engine, run, "TimerFired"))
        assert all(c == 1 for c in fired.values()), (run, fired)
        calls = ledger.calls(run)
        per_key = Counter(c["idempotency_key"] for c in calls if c["applied"] == 1)
        assert per_key == {f"a-{n}": 1, f"b-{n}": 1, f"c-{n}": 1}, (run, calls)
        per_attempt = Counter((c["idempotency_key"], c["attempt"]) for c in calls)
        assert all(c == 1 for c in per_attempt.values()), (run, calls)  # an attempt is delivered once
    assert len(ledger.effects()) == 90
    report = json.loads(cluster.cli("verify", "--json").stdout)
    assert {k: report[k] for k in ("runs", "ok", "problems")} == {"runs": 30, "ok": True, "problems": []}
    assert report["audit"]["ok"] is True


def test_late_result_of_a_stopped_worker_is_recorded_as_result_ignored(
    cluster: Cluster, engine: Engine, ledger: Ledger
) -> None:
    """A SIGSTOPped worker's late report, after the retry succeeded elsewhere, is ResultIgnored only."""
    engine.publish(one_step("late"))
    w1 = cluster.worker("w1", scheduler=False, concurrency=1)
    run = engine.start("late", input={"order": "g1", "block_attempt": 1})
    wait_until(lambda: ledger.started(run, 1), 20, "attempt 1 to start on w1")
    cluster.stop_quiescent(w1)

    w2 = cluster.worker("w2")  # expires w1's lease and runs attempt 2
    before = finish(engine, run, "completed")
    assert before["output"]["pid"] == w2.pid

    ledger.release(run, 1)
    w1.signal(signal.SIGCONT)
    ignored = wait_until(lambda: events(engine, run, "ResultIgnored"), 20, "w1's late report")
    after = engine.show(run)

    assert len(ignored) == 1
    data = ignored[0]["data"]
    assert (data["attempt"], data["result"]["outcome"]) == (1, "succeeded")
    assert data["result"]["output"]["pid"] == w1.pid
    assert data["reason"]
    assert after["ignored_results"] == before["ignored_results"] + 1
    assert after["seq"] == before["seq"] + 1
    for key in ("status", "output", "steps", "current_step", "error", "finished_at", "attention"):
        assert after[key] == before[key], key
    assert attempts(engine, run, "ActivitySucceeded") == [2]
    assert attempts(engine, run, "ActivityTimedOut") == [1]
    assert [(e["attempt"], e["data"]["worker"]) for e in events(engine, run, "ActivityStarted")] == [
        (1, "w1"),
        (2, "w2"),
    ]
    # The late attempt reached the ledger after attempt 2 had applied the effect: a replay, not a repeat.
    assert [(c["attempt"], c["applied"]) for c in ledger.calls(run)] == [(1, 0), (2, 1)]
    assert w1.alive()
    verify_ok(cluster)
