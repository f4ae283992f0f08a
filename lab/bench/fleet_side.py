"""lockstep's multi-process workloads: two worker processes, recovery after SIGKILL of every engine
process, 100,000 waiting runs, 20,000 timers due at once, and the approval round trip over HTTP.

Each workload starts real `lockstep` processes on a fresh database, drives them from this process and
reads the outcome from the database (and, for the activities, from the execution record file).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from lockstep.core.timeutil import iso, parse_iso
from lockstep.engine import Engine

from ..fleet import Fleet, Proc, free_port, sqlite_path, wait_until
from .activities import RECORD_ENV
from .common import percentile, summarize_latencies

__all__ = ["approval_round_trip", "recovery", "timers", "two_workers", "waiting"]

ACTIVITIES = "lab.bench.activities"
CHUNK = 500  # runs per bulk-start transaction when loading many waiting runs
LOAD_S_PER_TIMER = 0.0006  # the least loading budget per timer (measured: ~0.2 ms per run, quiet)
PARTITION_SETTLE_S = 4.0  # two schedulers rebalance partitions within a quarter of the 10 s lease


def _three(activity: str, sleep_ms: int = 0) -> dict[str, Any]:
    return {
        "name": "bench-fleet",
        "steps": [
            {
                "id": f"s{i}",
                "activity": activity,
                "input": {"n": "${input.n}", "sleep_ms": sleep_ms},
                "timeout": "60s",
            }
            for i in range(1, 4)
        ],
    }


class Lab(Fleet):
    """lockstep processes on one database, their logs in `workdir`, with an in-process engine and the
    activities' execution record; all are killed on exit."""

    WORKER_CONCURRENCY = 16
    WORKER_SCHEDULER = True

    def __init__(self, url: str, workdir: Path) -> None:
        self.record = workdir / "executions.jsonl"
        super().__init__(
            workdir, url, activities=ACTIVITIES, env={RECORD_ENV: str(self.record)}, ready_timeout=60
        )
        self.engine = Engine.open(url)

    def scheduler(
        self,
        name: str,
        *,
        poll_interval: str = "50ms",
        extra: Iterable[str] = (),
        faults: str = "",
        wait: bool = True,
    ) -> Proc:
        """A scheduler named after its process (`--scheduler-id`), so its partition leases say which."""
        args = ["--scheduler-id", name, *extra]
        return super().scheduler(name, poll_interval=poll_interval, extra=args, faults=faults, wait=wait)

    def completed(self) -> int:
        return int(self.sql("SELECT count(*) FROM runs WHERE status = 'completed'")[0][0])

    def executions(self) -> list[dict[str, Any]]:
        if not self.record.exists():
            return []
        return [json.loads(x) for x in self.record.read_text().splitlines() if x.strip()]

    def close(self) -> None:
        try:
            self.shutdown()
        finally:
            self.engine.close()


@contextmanager
def lab(url: str, workdir: Path) -> Iterator[Lab]:
    it = Lab(url, workdir)
    try:
        yield it
    finally:
        it.close()


def _wait_completed(lb: Lab, n: int, timeout: float) -> float:
    t0 = time.monotonic()
    wait_until(lambda: lb.completed() >= n, timeout, f"{n} runs to complete", interval=0.01)
    return time.monotonic() - t0


def two_workers(url: str, workdir: Path, runs: int, timeout: float) -> dict[str, Any]:
    """Throughput of the 3-activity process with two worker processes (one also schedules)."""
    with lab(url, workdir) as lb:
        lb.engine.publish(_three("bench.noop"))
        lb.worker("w1")
        lb.worker("w2", scheduler=False)
        t0 = time.perf_counter()
        for chunk in range(0, runs, 100):  # started by a client in batches, as an API server would
            lb.engine.service.start_many(
                "default", "bench-fleet", [{"n": i} for i in range(chunk, chunk + 100)]
            )
        _wait_completed(lb, runs, timeout)
        elapsed = time.perf_counter() - t0
    return {
        "runs": runs,
        "elapsed_s": elapsed,
        "runs_per_s": runs / elapsed,
        "steps_per_s": 3 * runs / elapsed,
    }


def recovery(url: str, workdir: Path, runs: int, timeout: float) -> dict[str, Any]:
    """`runs` runs in flight; SIGKILL every engine process (two workers, the scheduler) once a third of
    the steps completed; restart them; time until every run completed. The history must show no step
    started again after it had succeeded."""
    with lab(url, workdir) as lb:
        lb.engine.publish(_three("bench.record", sleep_ms=20))
        procs = [lb.scheduler("s1"), lb.worker("w1", scheduler=False), lb.worker("w2", scheduler=False)]
        lb.engine.service.start_many("default", "bench-fleet", [{"n": i} for i in range(runs)])
        succeeded = "SELECT count(*) FROM events WHERE type = 'ActivitySucceeded'"
        wait_until(lambda: lb.sql(succeeded)[0][0] >= runs, timeout, "a third of the steps")
        for p in procs:
            p.kill()
        at_kill = int(lb.sql(succeeded)[0][0])
        t0 = time.monotonic()
        lb.scheduler("s1")
        lb.worker("w1", scheduler=False)
        lb.worker("w2", scheduler=False)
        restart_s = time.monotonic() - t0
        wait_until(lambda: lb.completed() >= runs, timeout, "every run to complete", interval=0.01)
        recovered_s = time.monotonic() - t0
        reran = _reran_after_success(lb)
        per_step = Counter((e["run"], e["step"]) for e in lb.executions())
    return {
        "runs": runs,
        "steps_done_at_kill": at_kill,
        "restart_s": restart_s,
        "recovery_s": recovered_s,
        "completed_steps_started_again": reran,
        "steps_run_twice": sum(1 for n in per_step.values() if n > 1),
        "note": "steps_run_twice: attempts in flight at the kill, run again (at least once, same key)",
    }


def _reran_after_success(lb: Lab) -> int:
    """ActivityStarted for a step of a run after that step's ActivitySucceeded: must be 0."""
    rows = lb.sql(
        "SELECT run_id, seq, type, data FROM events"
        " WHERE type IN ('ActivityStarted', 'ActivitySucceeded') ORDER BY run_id, seq"
    )
    done: set[tuple[str, str]] = set()
    again = 0
    for run_id, _seq, kind, data in rows:
        step = str(json.loads(data)["step"])
        if kind == "ActivitySucceeded":
            done.add((run_id, step))
        elif (run_id, step) in done:
            again += 1
    return again


def timers(url: str, workdir: Path, n: int, timeout: float) -> dict[str, Any]:
    """`n` runs each waiting on a durable timer, all due at the same instant T, loaded while the
    schedulers already run (as in production: they are up, idle and have split the partitions when a
    burst of timers comes due): time from T until every timer fired, each timer's lag behind T, and
    whether any fired twice."""
    with lab(url, workdir) as lb:
        lb.engine.publish({"name": "bench-timer", "steps": [{"id": "t", "wait": {"until": "${input.at}"}}]})
        # PostgreSQL: two schedulers split the 64 partitions (one per core here); SQLite has one writer.
        names = ["s1"] if url.startswith("sqlite") else ["s1", "s2"]
        for x in names:
            lb.scheduler(x)
        time.sleep(PARTITION_SETTLE_S if len(names) > 1 else 0)
        # T far enough ahead that loading ends before it (a load that overran would fire early timers
        # while loading, so it fails the workload instead of reporting a wrong number). The budget is
        # measured on this machine now: one chunk of timers due next week (never fired here, never
        # counted), timed, sets the rate, with a 3x margin for a machine that gets busier meanwhile.
        t0 = time.perf_counter()
        later = iso(datetime.now(UTC) + timedelta(days=7))
        lb.engine.service.start_many("default", "bench-timer", [{"at": later}] * CHUNK)
        per_timer = max(LOAD_S_PER_TIMER, 3 * (time.perf_counter() - t0) / CHUNK)
        due_at = datetime.now(UTC) + timedelta(seconds=3 + n * per_timer)
        due = iso(due_at)
        for chunk in range(0, n, CHUNK):
            size = min(CHUNK, n - chunk)
            lb.engine.service.start_many("default", "bench-timer", [{"at": due}] * size)
        if datetime.now(UTC) >= parse_iso(due):
            raise RuntimeError(
                f"timers: loading {n:,} timers ran past their due time; raise LOAD_S_PER_TIMER"
            )
        wait_until(lambda: lb.completed() >= n, timeout + 60, f"{n} timers to fire", interval=0.02)
        fired = lb.sql("SELECT run_id, at FROM events WHERE type = 'TimerFired'")
        if len(fired) > n:
            raise RuntimeError(f"timers: {len(fired) - n} timer(s) due next week fired during the bench")
    start = parse_iso(due).timestamp()
    lags = [max(0.0, parse_iso(str(at)).timestamp() - start) for _, at in fired]
    per_run = Counter(r for r, _ in fired)
    return {
        "timers": n,
        "all_fired_s": max(lags, default=0.0),
        "lag_p50_ms": percentile(lags, 50) * 1000,
        "lag_p99_ms": percentile(lags, 99) * 1000,
        "fired_twice": sum(1 for c in per_run.values() if c > 1),
        "note": "schedulers running before the timers are loaded; from the due time until the last"
        " TimerFired event (its commit time); one scheduler on SQLite, two on PostgreSQL",
    }


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _db_mib(lb: Lab) -> float:
    if lb.backend == "sqlite":
        base = sqlite_path(lb.db_url)
        return sum(p.stat().st_size for p in base.parent.glob(base.name + "*")) / 2**20
    return float(lb.sql("SELECT pg_database_size(current_database())")[0][0]) / 2**20


def waiting(url: str, workdir: Path, small: int, large: int, idle_s: float) -> dict[str, Any]:
    """Runs waiting on approvals (half) and 30-day timers (half), with serve, a scheduler and a worker
    running: each process's memory at `small` and at `large` waiting runs, the database size, and the
    scheduler's CPU while nothing is due."""
    with lab(url, workdir) as lb:
        pr = lb.engine.service.principals
        pr.create_tenant("default")
        pr.create_user("default", "alice", ["approver"], [])
        steps = {
            "bench-approval": [
                {"id": "ok", "approval": {"approvers": {"users": ["alice"]}, "timeout": "30d"}}
            ],
            "bench-sleep": [{"id": "nap", "wait": "30d"}],
        }
        for name, s in steps.items():
            lb.engine.publish({"name": name, "steps": s})
        procs = {
            "serve": lb.serve("serve", free_port()),
            "scheduler": lb.scheduler("s1", poll_interval="200ms"),  # the default: idle CPU as deployed
            "worker": lb.worker("w1", scheduler=False),
        }
        out: dict[str, Any] = {}
        loaded = 0
        for size in (small, large):
            while loaded < size:
                k = min(CHUNK, size - loaded)
                for name in steps:
                    lb.engine.service.start_many("default", name, [{}] * (k // 2 or 1))
                loaded += 2 * (k // 2 or 1)
            time.sleep(idle_s / 2)  # let every process settle with the new load
            before = _cpu_s(procs["scheduler"].pid)
            time.sleep(idle_s)
            idle_cpu = (_cpu_s(procs["scheduler"].pid) - before) / idle_s
            out[str(size)] = {
                "waiting_runs": loaded,
                "rss_mib": {k: round(_rss_mib(p.pid), 1) for k, p in procs.items()},
                "scheduler_idle_cpu_pct": round(100 * idle_cpu, 2),
                "db_mib": round(_db_mib(lb), 1),
            }
    return out


def approval_round_trip(url: str, workdir: Path, n: int, timeout: float) -> dict[str, Any]:
    """An approval decision over HTTP (`POST /v1/approvals/decide`) until the next activity starts in a
    worker process (its own clock, written first thing), one run at a time."""
    with lab(url, workdir) as lb:
        pr = lb.engine.service.principals
        pr.create_tenant("default")
        alice = pr.create_user("default", "alice", ["approver"], []).api_key
        op = pr.create_user("default", "op", ["operator"], []).api_key
        lb.engine.publish(
            {
                "name": "bench-approve",
                "steps": [
                    {"id": "ok", "approval": {"approvers": {"users": ["alice"]}, "timeout": "1h"}},
                    {"id": "next", "activity": "bench.record", "timeout": "30s"},
                ],
            }
        )
        base = str(lb.serve("serve", free_port()).url)
        lb.worker("w1")
        samples: list[float] = []
        with httpx.Client(base_url=base, timeout=30) as http:
            for _ in range(n):
                run = lb.engine.start("bench-approve")
                wait_until(partial(_waits_for_approval, lb, run), timeout, "the approval request")
                link = http.post(
                    f"/v1/runs/{run}/approvals/ok/links",
                    json={"approver": "alice"},
                    headers={"Authorization": f"Bearer {op}"},
                ).json()
                t0 = time.time()
                answer = http.post(
                    "/v1/approvals/decide",
                    json={"token": link["token"], "decision": "approve"},
                    headers={"Authorization": f"Bearer {alice}"},
                )
                answer.raise_for_status()
                started = wait_until(partial(_started_at, lb, run), timeout, "the next activity", 0.001)
                samples.append(started - t0)
    return {**summarize_latencies(samples), "note": "decision POST sent -> activity function entered"}


def _waits_for_approval(lb: Lab, run: str) -> bool:
    return bool(lb.engine.show(run)["wait_kind"] == "approval")


def _started_at(lb: Lab, run: str) -> float:
    """When the run's activity started (0.0: not yet)."""
    for e in reversed(lb.executions()):
        if e["run"] == run:
            return float(e["t"])
    return 0.0


WORKLOADS: dict[str, Callable[..., dict[str, Any]]] = {
    "two_workers": two_workers,
    "recovery": recovery,
    "timers": timers,
    "waiting": waiting,
    "approval_round_trip": approval_round_trip,
}
