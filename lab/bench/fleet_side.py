"""lockstep's multi-process workloads: two worker processes, recovery after SIGKILL of every engine
process (restarted under the same ids), memory from 1,000 to 1,000,000 waiting runs, 100,000 timers due
at once, and the approval round trip over HTTP (sizes: lab.bench.fleet_plan).

Each workload starts real `lockstep` processes on a fresh database, drives them from this process and
reads the outcome from the database (and, for the activities, from the execution record file).
"""

from __future__ import annotations

import json
import os
import re
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


RECOVERY_SLEEP_MS = 20
RECOVERY_WORKERS = ("w1", "w2")
RECOVERY_LEASE_S = 10.0  # `lockstep worker --lease-ttl`'s default, which the workers run with


def recovery(url: str, workdir: Path, runs: int, timeout: float) -> dict[str, Any]:
    """`runs` runs in flight; SIGKILL every engine process (two workers, the scheduler) once a third of
    the steps completed; restart them under the same `--worker-id` / `--scheduler-id`, so each abandons
    its predecessor's leases at start-up instead of waiting for them to expire; time until every run
    completed. The history must show no step started again after it had succeeded."""
    with lab(url, workdir) as lb:
        lb.engine.publish(_three("bench.record", sleep_ms=RECOVERY_SLEEP_MS))
        procs = [lb.scheduler("s1"), *(lb.worker(w, scheduler=False) for w in RECOVERY_WORKERS)]
        lb.engine.service.start_many("default", "bench-fleet", [{"n": i} for i in range(runs)])
        succeeded = "SELECT count(*) FROM events WHERE type = 'ActivitySucceeded'"
        wait_until(lambda: lb.sql(succeeded)[0][0] >= runs, timeout, "a third of the steps")
        for p in procs:
            p.kill()
        at_kill = int(lb.sql(succeeded)[0][0])
        t0 = time.monotonic()
        # all three at once, as a supervisor restarts a host's processes; ready when each says so
        s1 = lb.scheduler("s1", wait=False)
        again = [lb.worker(w, scheduler=False, wait=False) for w in RECOVERY_WORKERS]
        lb.wait_ready(s1, "scheduler running")
        for w in again:
            lb.wait_ready(w, "serving")
        restart_s = time.monotonic() - t0
        wait_until(lambda: lb.completed() >= runs, timeout, "every run to complete", interval=0.01)
        recovered_s = time.monotonic() - t0
        reran = _reran_after_success(lb)
        per_step = Counter((e["run"], e["step"]) for e in lb.executions())
        abandoned = sum(_abandoned(p.log()) for p in again)
    slots = len(RECOVERY_WORKERS) * Lab.WORKER_CONCURRENCY
    left = 3 * runs - at_kill
    return {
        "runs": runs,
        "steps_done_at_kill": at_kill,
        "restart_s": restart_s,
        "recovery_s": recovered_s,
        "after_ready_s": recovered_s - restart_s,
        # the least time the steps left take however fast the engine: their sleep spread over the slots
        "activity_floor_s": left * RECOVERY_SLEEP_MS / 1000 / slots,
        "abandoned_leases": abandoned,
        "lease_ttl_s": RECOVERY_LEASE_S,
        "completed_steps_started_again": reran,
        "steps_run_twice": sum(1 for n in per_step.values() if n > 1),
        "settings": {
            "restart": "same ids (--scheduler-id s1, --worker-id w1 w2): leases abandoned at start-up",
            "activity_ms": RECOVERY_SLEEP_MS,
            "slots": slots,
        },
        "note": "steps_run_twice: attempts in flight at the kill, run again (at least once, same key)",
    }


def _abandoned(log: str) -> int:
    """The leases a restarted worker says it took back from its predecessor (0: none logged)."""
    found = re.search(r"abandoned (\d+) lease", log)
    return int(found.group(1)) if found else 0


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
    return {"timers": n, **timer_stats(parse_iso(due).timestamp(), fired), "note": TIMERS_NOTE}


TIMERS_NOTE = (
    "schedulers running before the timers are loaded; from the due time until the last TimerFired event"
    " (its commit time); one scheduler on SQLite, two on PostgreSQL"
)
PARTITIONS = 64  # the scheduler's partitions: a run's is the last byte of its id, mod 64


def timer_stats(due: float, fired: list[tuple[Any, Any]]) -> dict[str, float]:
    """From (run id, fired at) of every TimerFired: the last lag behind `due` (all fired), the lag
    percentiles, the firing rate overall and per partition (the median partition's timers over its own
    span), and how many fired twice."""
    at = [(str(r), parse_iso(str(t)).timestamp()) for r, t in fired]
    lags = [max(0.0, t - due) for _, t in at]
    by_part: dict[int, list[float]] = {}
    for run, t in at:
        by_part.setdefault(_partition(run), []).append(t)
    part_rates = [len(ts) / span for ts in by_part.values() if (span := max(ts) - due) > 0]
    last = max(lags, default=0.0)
    per_run = Counter(r for r, _ in at)
    return {
        "all_fired_s": last,
        **{f"lag_p{q}_ms": (percentile(lags, q) if lags else 0.0) * 1000 for q in (50, 90, 99)},
        "fired_per_s": len(at) / last if last > 0 else 0.0,
        "partition_fired_per_s_p50": percentile(part_rates, 50) if part_rates else 0.0,
        "fired_twice": sum(1 for c in per_run.values() if c > 1),
    }


def _partition(run_id: str) -> int:
    try:
        return int(run_id[-2:], 16) % PARTITIONS
    except ValueError:
        return 0


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
        return sum(p.stat().st_size for p in base.parent.glob(base.name + "*") if p.is_file()) / 2**20
    return float(lb.sql("SELECT pg_database_size(current_database())")[0][0]) / 2**20


def waiting(url: str, workdir: Path, points: list[int], idle_s: float) -> dict[str, Any]:
    """Runs waiting on approvals (half) and 30-day timers (half), with serve, a scheduler and a worker
    running, loaded up to each of `points` in turn: at each, every process's memory, the database size,
    the scheduler's CPU while nothing is due, and how fast the runs were loaded."""
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
        for size in sorted(points):
            t0 = time.perf_counter()
            added = loaded
            while loaded < size:
                k = min(CHUNK, size - loaded)
                for name in steps:
                    lb.engine.service.start_many("default", name, [{}] * (k // 2 or 1))
                loaded += 2 * (k // 2 or 1)
            load_s = time.perf_counter() - t0
            time.sleep(idle_s / 2)  # let every process settle with the new load
            before = _cpu_s(procs["scheduler"].pid)
            time.sleep(idle_s)
            idle_cpu = (_cpu_s(procs["scheduler"].pid) - before) / idle_s
            out[str(size)] = {
                "waiting_runs": loaded,
                "rss_mib": {k: round(_rss_mib(p.pid), 1) for k, p in procs.items()},
                "scheduler_idle_cpu_pct": round(100 * idle_cpu, 2),
                "db_mib": round(_db_mib(lb), 1),
                "loaded_per_s": round((loaded - added) / load_s) if load_s > 0 else 0,
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
        answered: list[float] = []
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
                answered.append(time.time() - t0)
                started = wait_until(partial(_started_at, lb, run), timeout, "the next activity", 0.001)
                samples.append(started - t0)
    # The part until the answer is the server's (HTTP, the decision's transaction, its commit); the rest
    # is the worker's (woken, claim, dispatch), which may begin before the answer reaches the client.
    until_answer = summarize_latencies(answered)
    return {
        **summarize_latencies(samples),
        "answered_p50_ms": until_answer["p50_ms"],
        "answered_p99_ms": until_answer["p99_ms"],
        "note": "decision POST sent -> activity function entered; answered: -> the HTTP answer received",
    }


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
