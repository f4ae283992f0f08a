"""Scenarios for faults around one activity: crashes at each point of an attempt, duplicate deliveries,
expired leases with late reports, lost responses, duplicate timers; and the broken builds that prove
the checker can fail.

Each scenario drives real processes (lab/fleet/), injects its fault, waits until every run settled, and
returns the checker's verdict with the seconds from the last injected fault to "all settled".
"""

from __future__ import annotations

import json
import signal
import time

from lockstep.core.commands import FireTimer
from lockstep.core.flow import run_of_task
from lockstep.core.lanes import attempts, attentions
from lockstep.errors import LockstepError

from ..fleet import Proc
from .base import (
    Ctx,
    Supervisor,
    every,
    pay_definition,
    requeue_done_tasks,
    settle_time,
    start_runs,
    unsettled,
)
from .checker import Verdict
from .metricscheck import MetricPorts

__all__ = [
    "crash_after_commit",
    "duplicate_delivery",
    "duplicate_timer",
    "lease_expiry",
    "lost_response",
]

# Where an attempt can die: before the downstream call, after its effect but before the report,
# inside the transaction that records the result (written, not committed), right after that commit.
CRASH_POINTS = ("worker.before_call", "worker.after_call", "commit.ReportSuccess", "worker.after_report")
# A remote worker commits nothing (the server records its report): its points are the worker's own.
REMOTE_CRASH_POINTS = ("worker.before_call", "worker.after_call", "worker.after_report")


def _recovery(settled: float | None, t0: float, last_fault: float | None) -> float | None:
    if settled is None:
        return None
    end = t0 + settled
    return round(max(0.0, end - (last_fault or t0)), 2)


def _scheduler(ctx: Ctx, faults: str = "", ports: MetricPorts | None = None) -> Supervisor:
    # A process with a kill point may die before it prints that it is ready: do not wait for that.
    def spawn(n: int) -> Proc:
        extra = ports.args(f"s{n}") if ports is not None else []
        return ctx.fleet.scheduler(f"s{n}", faults=faults if n == 1 else "", wait=not faults, extra=extra)

    return Supervisor(1, spawn)


def crash_after_commit(ctx: Ctx, *, parallel: bool = False) -> tuple[Verdict, float | None]:
    """Workers SIGKILL themselves at each point of an attempt (drawn from the seed), the scheduler in the
    middle of firing a timer or expiring a lease; the driver restarts whatever died. `parallel`: every
    scenario of this module takes it, to run with two branches of a run in flight at once."""
    f = ctx.fleet
    f.engine.publish(pay_definition(parallel=parallel), tenant=ctx.tenant)
    budget = max(4, ctx.runs // 4)
    points = REMOTE_CRASH_POINTS if f.http else CRASH_POINTS

    def faults(n: int) -> str:
        if n > budget:
            return ""
        return f"{ctx.rng.choice(points)}=kill@{ctx.rng.randint(1, 4)}"

    ports = MetricPorts(f)  # every process's counters, summed at the end (metricscheck.py)
    sched = _scheduler(ctx, f"commit.FireTimer=kill@{ctx.rng.randint(2, 8)};commit.ExpireLease=kill@1", ports)

    def worker(n: int) -> Proc:
        spec = faults(n)
        return f.worker(f"w{n}", faults=spec, wait=not spec, extra=ports.args(f"w{n}"))

    workers = Supervisor(2, worker)

    def tick() -> None:
        workers.tick()
        sched.tick()

    with ctx.monitor() as mon:
        start_runs(ctx, ctx.runs)
        t0 = time.monotonic()
        settled = settle_time(ctx, t0, tick=tick)
    hits = f.failpoint_hits()
    for h in hits:
        ctx.count(f"killed at {h['point']}")
    last = max(x for x in (workers.last_death, sched.last_death, t0) if x is not None)
    verdict = ctx.verdict(monitor=mon)
    for what, n in ports.check(verdict, ctx.tenant, exact=False).items():  # killed ones lost theirs
        ctx.count(what, n)
    return verdict, _recovery(settled, t0, last)


def duplicate_delivery(ctx: Ctx, *, parallel: bool = False) -> tuple[Verdict, float | None]:
    """Every attempt is delivered twice inside the worker (run and reported twice with the same lease),
    and the driver puts finished tasks back in the outbox as a redelivering queue would."""
    f = ctx.fleet
    f.engine.publish(pay_definition(parallel=parallel), tenant=ctx.tenant)
    f.scheduler("s1")
    for n in (1, 2):
        f.worker(f"w{n}", faults="worker.deliver_twice=on")

    def redeliver() -> None:
        ctx.count("outbox rows redelivered", requeue_done_tasks(f))

    with ctx.monitor() as mon:
        start_runs(ctx, ctx.runs)
        t0 = time.monotonic()
        with every(0.2, redeliver):
            settled = settle_time(ctx, t0)
        # The last redeliveries must be claimed (and refused) before the check, so wait for them too.
        time.sleep(0.5)
    ctx.count("attempts delivered twice", len(f.failpoint_hits()))
    ignored = f.sql("SELECT count(*) FROM events WHERE type = 'ResultIgnored'")[0][0]
    ctx.count("duplicate reports recorded as ResultIgnored", int(ignored))
    return ctx.verdict(monitor=mon), settled


def lease_expiry(ctx: Ctx, *, unsafe: bool = False, parallel: bool = False) -> tuple[Verdict, float | None]:
    """Workers freeze right after the downstream effect, before reporting (the attempt's thread holds,
    the driver SIGSTOPs the process at a moment it holds no database lock); their leases expire and
    another worker retries with the same key; once the run has moved on to its next activity the
    frozen worker gets SIGCONT and reports late. With `unsafe`, fencing is switched off in it."""
    f = ctx.fleet
    f.engine.publish(pay_definition(wait="10ms", parallel=parallel), tenant=ctx.tenant)
    f.control(delay_ms=400)  # an activity lasts long enough for a late report to land inside the next
    ports = MetricPorts(f)  # every process's counters, summed at the end (metricscheck.py)
    f.scheduler("s1", extra=ports.args("s1"))
    extra = ";unsafe.no_fencing=on" if unsafe else ""
    frozen: dict[int, Proc] = {}
    for n in (1, 2, 3):
        # The first attempts are charges; a freeze there leaves the run's ship attempt to land in.
        nth = 1 if unsafe else ctx.rng.randint(1, 2)  # the broken build must be caught every time
        proc = f.worker(f"a{n}", faults=f"worker.after_call=hold@{nth}{extra}", extra=ports.args(f"a{n}"))
        frozen[proc.pid] = proc
    f.worker("b1", extra=ports.args("b1"))
    stopped: dict[int, float] = {}
    resumed: dict[int, float] = {}

    def tick() -> None:
        holds = [h for h in f.failpoint_hits() if h["action"] == "hold" and int(h["pid"]) not in resumed]
        # Resume first: a late report must land while the next attempt still runs (400 ms).
        for h in sorted(holds, key=lambda h: int(h["pid"]) not in stopped):
            pid = int(h["pid"])
            if pid not in stopped:
                if not f.stop_quiescent(frozen[pid]):
                    continue  # it was always inside a transaction: try again on the next tick
                ctx.count("workers frozen (SIGSTOP) after the effect")
                f.release(h)  # the held thread goes on as soon as the process is continued
                stopped[pid] = time.monotonic()
                continue
            state = ctx.engine_service.state(None, run_of_task(str(h["task"])))
            moved_on = any(a.task_id != h["task"] and a.fencing is not None for a in attempts(state))
            if moved_on or state.terminal or time.monotonic() - stopped[pid] > 8:
                frozen[pid].signal(signal.SIGCONT)
                resumed[pid] = time.monotonic()
                ctx.count("late reports after lease expiry" + ("" if moved_on else " (run already done)"))

    with ctx.monitor() as mon:
        start_runs(ctx, ctx.runs)
        t0 = time.monotonic()
        settled = settle_time(ctx, t0, tick=tick)
        # A worker frozen on the very last attempt reports after the run finished: let it land.
        for proc in frozen.values():
            proc.signal(signal.SIGCONT)
        time.sleep(0.5)
    ignored = f.sql("SELECT count(*) FROM events WHERE type = 'ResultIgnored'")[0][0]
    ctx.count("late results recorded as ResultIgnored", int(ignored))
    verdict = ctx.verdict(monitor=mon)
    for what, n in ports.check(verdict, ctx.tenant, exact=True).items():  # nobody was killed
        ctx.count(what, n)
    return verdict, _recovery(settled, t0, max(resumed.values(), default=t0))


def lost_response(ctx: Ctx, *, unsafe: bool = False, parallel: bool = False) -> tuple[Verdict, float | None]:
    """The downstream applies the effect and drops the response (and sometimes fails outright): an
    at-least-once step retries with the same key and gets the saved response; an at-most-once step
    stops in needs_attention, where an operator checks the ledger and resolves or retries it. With
    `unsafe`, workers send a new idempotency key on every attempt (a broken build)."""
    f = ctx.fleet
    notify = {"id": "notify", "activity": "pay.ship", "delivery": "at_most_once", "timeout": "10s"}
    f.engine.publish(pay_definition(wait="10ms", extra=[notify], parallel=parallel), tenant=ctx.tenant)
    f.control(drop_rate=0.25, fail_rate=0.1, seed=ctx.seed)
    f.scheduler("s1")
    for n in (1, 2):
        f.worker(f"w{n}", faults="unsafe.key_per_attempt=on" if unsafe else "")
    handled: set[tuple[str, int]] = set()

    def operator() -> None:
        """What a person does with an unknown outcome: look downstream, then resolve or retry."""
        with ctx.engine_service.read() as tx:
            states = tx.runs(ctx.tenant, status="needs_attention", definition=None, after="", limit=1000)
        effects = {e["idempotency_key"]: e for e in f.ledger.effects()}
        for s in states:
            waiting = attentions(s)  # in a parallel run, a branch's step may be the one
            if not waiting or (s.run_id, s.seq) in handled:
                continue
            handled.add((s.run_id, s.seq))
            step = waiting[0]["step"]
            key = s.steps[step].idempotency_key or f"{s.tenant}:{s.run_id}:{step}"
            applied = effects.get(key)
            if applied is not None:
                output = json.dumps({"id": applied["response"]["id"], "resolved_from": "ledger"})
                why = "the downstream ledger shows the effect was applied"
                f.cli("resolve", s.run_id, step, "--as", "succeeded", "--output", output, "--reason", why)
                ctx.count("unknown outcomes resolved from the ledger")
            else:
                f.cli("retry", s.run_id, step, "--reason", "the downstream has no record of the request")
                ctx.count("unknown outcomes retried (no effect downstream)")

    with ctx.monitor() as mon:
        start_runs(ctx, ctx.runs)
        t0 = time.monotonic()
        deadline = t0 + ctx.deadline_s
        while time.monotonic() < deadline and unsettled(ctx, human_ok=False):
            operator()
            time.sleep(0.2)
        settled = settle_time(ctx, t0)
    outcomes = [r["outcome"] for r in f.ledger.requests()]
    for kind in ("dropped", "failed", "replayed"):
        ctx.count(f"downstream {kind}", outcomes.count(kind))
    return ctx.verdict(monitor=mon), settled


def duplicate_timer(ctx: Ctx, *, parallel: bool = False) -> tuple[Verdict, float | None]:
    """Three schedulers race for the same timers, the driver re-arms fired timer rows (a queue
    delivering a timer twice) and sends FireTimer again for timers that already fired."""
    f = ctx.fleet
    f.engine.publish(pay_definition(wait="200ms", parallel=parallel), tenant=ctx.tenant)
    f.control(fail_rate=0.2, seed=ctx.seed)  # failures arm retry timers as well as the wait timers
    for n in (1, 2, 3):
        f.scheduler(f"s{n}")
    for n in (1, 2):
        f.worker(f"w{n}")

    def duplicate() -> None:
        rows = f.sql(
            "SELECT run_id, key, generation FROM timers WHERE status = 'fired' ORDER BY fire_at DESC LIMIT 4"
        )
        for run_id, key, generation in rows[:2]:
            f.sql(
                "UPDATE timers SET status = 'scheduled' WHERE run_id = ? AND key = ? AND generation = ?",
                (run_id, key, generation),
            )
            ctx.count("fired timer rows re-armed")
        for run_id, key, generation in rows[2:]:
            try:
                ctx.engine_service.command(run_id, FireTimer(key, int(generation)))
                ctx.count("second FireTimer accepted (must not happen)")
            except LockstepError:
                ctx.count("second FireTimer refused")

    with ctx.monitor() as mon:
        start_runs(ctx, ctx.runs)
        t0 = time.monotonic()
        with every(0.15, duplicate):
            settled = settle_time(ctx, t0)
        time.sleep(0.5)  # the schedulers see the last re-armed rows before the check
    return ctx.verdict(monitor=mon), settled
