"""`lockstep worker --url`: remote workers over the HTTP task API of a real `lockstep serve` on PostgreSQL,
with the database worker's guarantees: runs complete, a SIGKILLed worker's lease expires and another
worker finishes the step, a result finished while the server is down is delivered once it is back
(exactly once), SIGTERM drains, and a stale (fenced) result is refused and dropped."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from lockstep.client import Client
from lockstep.errors import Conflict
from lockstep.runtime.activity import ActivityContext, Registry
from lockstep.runtime.remote import RemoteWorker

from .serverkit import TENANT, Server, one_step, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _serve(tmp_path: Path, url: str) -> Iterator[Server]:
    s = Server(tmp_path, url)
    try:
        s.publish(one_step("pay"))
        yield s.up()
    finally:
        s.shutdown()


@pytest.fixture(params=["postgresql", "sqlite"])
def any_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    """A server on either backend."""
    if request.param == "sqlite":
        yield from _serve(tmp_path, f"sqlite:///{tmp_path / 'lockstep.db'}")
    else:
        yield from _serve(tmp_path, str(request.getfixturevalue("pg_url")))


@pytest.fixture
def server(pg_url: str, tmp_path: Path) -> Iterator[Server]:
    """A server on PostgreSQL (the production backend of remote workers)."""
    yield from _serve(tmp_path, pg_url)


def _start(s: Server, order: int, **extra: Any) -> str:
    return s.engine.start("pay", input={"order": order, **extra}, tenant=TENANT)


def _status(s: Server, run_id: str) -> str:
    return str(s.engine.show(run_id, tenant=TENANT)["status"])


def _attempts(s: Server, run_id: str, kind: str) -> list[int]:
    return [int(e["attempt"]) for e in s.events(run_id, kind)]


def test_remote_workers_complete_runs(any_server: Server) -> None:
    """Two `worker --url` processes (an API key file, no --db) complete every run once; the leases are
    in the worker key's name (the API prefixes the principal)."""
    s = any_server
    runs = [_start(s, i) for i in range(8)]
    s.remote_worker("w1")
    s.remote_worker("w2")
    wait_until(lambda: all(_status(s, r) == "completed" for r in runs), 90, "every run to complete")
    for r in runs:
        assert _attempts(s, r, "ActivitySucceeded") == [1]
        started = s.events(r, "ActivityStarted")
        assert started[0]["data"]["worker"] in ("u-worker/w1", "u-worker/w2")
    assert len(s.ledger.effects()) == len(runs)
    workers = [p for p in s.procs if p.name.startswith("w")]
    assert all("--db" not in list(p.popen.args) for p in workers)  # type: ignore[arg-type]


def test_sigkill_mid_activity_then_another_worker_completes(server: Server) -> None:
    """A remote worker SIGKILLed inside an activity leaves its lease to expire; the server's scheduler
    times the attempt out and a second remote worker runs attempt 2 with the same idempotency key."""
    s = server
    run = _start(s, 1, block_attempt=1)
    w1 = s.remote_worker("w1", lease_ttl="1s", concurrency=1)  # busy: it polls no more
    wait_until(lambda: s.ledger.started(run, 1), 60, "attempt 1 to start in w1")
    assert w1.kill() == -signal.SIGKILL
    w2 = s.remote_worker("w2", lease_ttl="1s")
    wait_until(lambda: _status(s, run) == "completed", 60, "the run to complete")
    assert _attempts(s, run, "ActivityTimedOut") == [1]
    assert _attempts(s, run, "ActivitySucceeded") == [2]
    calls = s.ledger.calls(run)
    assert [(c["attempt"], c["pid"]) for c in calls] == [(1, w1.pid), (2, w2.pid)]
    assert calls[0]["idempotency_key"] == calls[1]["idempotency_key"]
    assert len(s.ledger.effects(run)) == 1


def test_a_remote_worker_restarted_under_its_id_retries_its_predecessors_attempt_at_once(
    server: Server,
) -> None:
    """With a 60 s lease, a remote worker SIGKILLed mid-activity and restarted under the same
    --worker-id hands the dead lease back at start-up (POST /v1/tasks/abandon): attempt 2 runs within
    seconds, not after the minute, with the same idempotency key."""
    s = server
    run = _start(s, 1, block_attempt=1)
    w1 = s.remote_worker("w1", lease_ttl="60s", concurrency=1)
    wait_until(lambda: s.ledger.started(run, 1), 60, "attempt 1 to start in w1")
    assert w1.kill() == -signal.SIGKILL
    restarted = time.monotonic()
    again = s.remote_worker("w1", lease_ttl="60s")
    wait_until(lambda: _status(s, run) == "completed", 40, "the run to complete")
    assert time.monotonic() - restarted < 40  # well under the 60 s lease
    assert "abandoned 1 lease(s) of a previous w1" in again.log()
    assert [e["data"]["worker"] for e in s.events(run, "ActivityStarted")] == ["u-worker/w1"] * 2
    assert _attempts(s, run, "ActivitySucceeded") == [2]
    calls = s.ledger.calls(run)
    assert [(c["attempt"], c["pid"]) for c in calls] == [(1, w1.pid), (2, again.pid)]
    assert len(s.ledger.effects(run)) == 1


def test_result_kept_across_a_server_outage_and_delivered_once(server: Server) -> None:
    """The server is SIGKILLed while the activity runs; the finished result is kept and retried until the
    server is back, then recorded exactly once (one attempt, one success, nothing ignored)."""
    s = server
    run = _start(s, 1, block_attempt=1)
    w1 = s.remote_worker("w1", lease_ttl="30s")  # longer than the outage: the lease stays valid
    wait_until(lambda: s.ledger.started(run, 1), 60, "attempt 1 to start")
    s.down()
    s.ledger.release(run, 1)
    wait_until(lambda: s.ledger.calls(run)[0]["finished"], 30, "the activity to finish")
    wait_until(lambda: "failed" in w1.log(), 30, "the worker to fail reporting while the server is down")
    time.sleep(1.5)  # a few more tries at a growing interval, all without an answer
    assert w1.alive()
    s.up()
    wait_until(lambda: _status(s, run) == "completed", 60, "the kept result to be delivered")
    assert _attempts(s, run, "ActivityStarted") == [1]
    assert _attempts(s, run, "ActivitySucceeded") == [1]
    assert s.events(run, "ResultIgnored") == []
    assert s.events(run, "ActivityTimedOut") == []
    assert len(s.ledger.calls(run)) == 1


def test_sigterm_drains_in_flight_work_and_takes_no_more(server: Server) -> None:
    """SIGTERM: the worker polls no more, finishes the activity it holds, delivers its result and exits
    0; a run started after the signal is left to other workers."""
    s = server
    run = _start(s, 1, block_attempt=1)
    w1 = s.remote_worker("w1", lease_ttl="30s", concurrency=2)
    wait_until(lambda: s.ledger.started(run, 1), 60, "attempt 1 to start")
    w1.signal(signal.SIGTERM)
    wait_until(lambda: "draining" in w1.log(), 30, "the worker to start draining")
    time.sleep(1.5)  # the long poll in flight at the signal (1s) has returned; none follows
    later = _start(s, 2)
    time.sleep(1.5)  # a poll would have taken `later` by now
    assert w1.alive(), "the worker left before its in-flight activity finished"
    s.ledger.release(run, 1)
    assert w1.wait(30) == 0
    assert _status(s, run) == "completed"
    assert _attempts(s, run, "ActivitySucceeded") == [1]
    assert s.events(later, "ActivityStarted") == []
    s.remote_worker("w2")
    wait_until(lambda: _status(s, later) == "completed", 60, "the later run to complete on w2")


class _NoHeartbeats(Client):
    """The worker key's client with heartbeats that never reach the server (a worker cut off from it
    only for heartbeats): its lease runs out while the activity runs."""

    def heartbeat(self, task_id: str, fencing_token: int, lease_seconds: float = 30.0) -> bool:
        return True


def test_a_stale_result_is_refused_and_dropped(server: Server) -> None:
    """An attempt whose lease expired while it ran reports late: the server answers 409 (stale_result,
    recorded as ResultIgnored), the remote worker drops the result instead of retrying, and the
    attempt that took over is the one that counts. The raw API gives the same answer."""
    s = server
    entered, release = threading.Event(), threading.Event()
    registry = Registry()

    def step(_input: Any, ctx: ActivityContext) -> dict[str, Any]:
        entered.set()
        release.wait(60)
        return {"attempt": ctx.attempt, "late": True}

    registry.register("test.step", step)
    run = _start(s, 1)
    api = _NoHeartbeats(s.url, api_key_file=s.key_files["worker"])
    rw = RemoteWorker(api, registry, concurrency=1, lease_ttl=timedelta(seconds=1), poll_wait=timedelta(0))
    rw.start()
    try:
        assert entered.wait(60)
        wait_until(lambda: _attempts(s, run, "ActivityTimedOut") == [1], 60, "attempt 1's lease to expire")
        with Client(s.url, api_key_file=s.key_files["worker"]) as other:
            tasks = wait_until(lambda: other.poll_tasks(["test.step"], wait_seconds=1), 60, "attempt 2")
            (task,) = tasks
            assert task.attempt == 2
            first = s.events(run, "ActivityStarted")[0]["data"]
            with pytest.raises(Conflict) as info:  # the raw API: attempt 1's token is stale now
                other.complete_task(first["task_id"], 1, first["fencing"], {"raw": True})
            assert info.value.code == "stale_result"
            other.complete_task(task.task_id, task.attempt, task.fencing_token, {"attempt": 2})
        release.set()
        wait_until(lambda: rw.completed == 1, 30, "the late result to be answered")
        assert rw.dropped == 1
        assert rw.stop(10)
    finally:
        release.set()
        rw.stop(5)
        api.close()
    assert _status(s, run) == "completed"
    assert s.engine.show(run, tenant=TENANT)["output"] == {"attempt": 2}
    assert _attempts(s, run, "ActivitySucceeded") == [2]
    assert len(s.events(run, "ResultIgnored")) >= 1
