"""Retention under load: `purge_under_load`. Runs start, finish, wait for people and get legal holds in
waves while two schedulers purge with a retention of seconds; the schedulers SIGKILL themselves in the
middle of purges (inside a delete transaction, right after a batch of tombstones) and are restarted.

Tenant `default` keeps finished runs 2 s; some runs are held from the moment they start (half of those
released once they finished), some wait for an approval that never comes (they cannot finish). Tenant
`vault` keeps finished runs 1 s but is under a tenant hold all along. The checker (purgecheck.py, on
top of checker.py for the runs still stored) then requires: nothing unfinished lost, nothing held
purged, nothing purged early, every finished unheld run gone with a complete tombstone once its
retention plus one purge period (plus the allowance for a killed scheduler's restart) has passed, and
everything still stored verified.
"""

from __future__ import annotations

import time
from typing import Any

from .base import Ctx, Supervisor, pay_definition
from .checker import Expect, Verdict
from .purgecheck import PurgeWatch, Tracked, check_purge

__all__ = ["purge_under_load"]

RETENTION_S = {"default": 2.0, "vault": 1.0}
PERIOD_S = 0.5
# A scheduler that died mid-purge is replaced within about a second (process start); on PostgreSQL its
# partitions move to the others after their lease (2 s, the fleet's --partition-ttl).
ALLOWANCE_S = 4.0
WAVES = 4
APPROVAL = {
    "id": "sign_off",
    "approval": {"approvers": {"users": ["alice"]}, "quorum": 1, "timeout": "1h"},
}
KILL_POINTS = ("purge.rows", "purge.tombstoned", "purge.deleted")


def purge_under_load(ctx: Ctx) -> tuple[Verdict, float | None]:
    """Waves of runs (finishing, held, waiting for people) while killed-and-restarted schedulers purge."""
    f = ctx.fleet
    f.cli("tenants", "create", "default", expect=None)
    f.cli("tenants", "create", "vault")
    f.cli("users", "create", "alice", "--tenant", "default", "--roles", "approver")
    f.engine.publish(pay_definition(wait="200ms"), tenant="default")
    f.engine.publish(pay_definition("long", wait="10ms", extra=[APPROVAL]), tenant="default")
    f.engine.publish(pay_definition(wait="10ms"), tenant="vault")
    f.cli("tenants", "set", "default", "--retention", "2s")
    f.cli("tenants", "set", "vault", "--retention", "1s")
    f.cli("tenants", "hold", "vault", "--reason", "regulator inquiry 2025-3")
    ctx.count("tenant holds", 1)
    points = [f"{ctx.rng.choice(KILL_POINTS)}=kill@{ctx.rng.randint(1, 3)}" for _ in range(2)]

    def scheduler(n: int) -> Any:
        faults = points[n - 1] if n <= len(points) else ""
        extra = ["--purge-interval", f"{int(PERIOD_S * 1000)}ms", "--purge-batch", "10"]
        return f.scheduler(f"s{n}", extra=extra, faults=faults, wait=not faults)

    schedulers = Supervisor(2, scheduler)
    workers = Supervisor(2, lambda n: f.worker(f"w{n}"))
    tracked: dict[str, Tracked] = {}
    per_wave = max(3, ctx.runs // WAVES)
    n = 0

    def tick() -> None:
        schedulers.tick()
        workers.tick()

    with ctx.monitor() as mon, PurgeWatch(f) as watch:
        for wave in range(WAVES):
            for _ in range(per_wave):
                rid = f.engine.start("pay", input={"amount": 100 + n, "ref": f"r{n}"}, tenant="default")
                tracked[rid] = Tracked("default")
                if ctx.rng.random() < 0.25:  # held while it still runs
                    f.engine.service.retention.hold_run("default", rid, f"case {n}", "driver")
                    tracked[rid].held = True
                    ctx.count("runs held while running")
                n += 1
            rid = f.engine.start("long", input={"amount": 1, "ref": f"long{wave}"}, tenant="default")
            tracked[rid] = Tracked("default", can_finish=False)
            rid = f.engine.start("pay", input={"amount": 2, "ref": f"vault{wave}"}, tenant="vault")
            tracked[rid] = Tracked("vault")
            if wave == WAVES // 2:
                _release_some(ctx, tracked, watch)
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                tick()
                time.sleep(0.05)
        _release_some(ctx, tracked, watch, wait=True)
        settled = _settle(ctx, tracked, watch, tick)
    ctx.count("schedulers SIGKILLed mid-purge (restarted)", schedulers.deaths)
    verdict = ctx.verdict(monitor=mon)
    vault = ctx.verdict(Expect(tenant="vault"))  # its runs are all stored: verified like the others
    for check, examples in vault.examples.items():
        for example in examples:
            verdict.flag(check, example)
    for outcome, count in vault.outcomes.items():
        verdict.outcomes[outcome] = verdict.outcomes.get(outcome, 0) + count
    numbers = check_purge(
        f,
        tracked,
        watch,
        RETENTION_S,
        period_s=PERIOD_S,
        allowance_s=ALLOWANCE_S,
        held_tenants={"vault"},
        v=verdict,
    )
    for what, value in numbers.items():
        ctx.injected[what] = value
    verdict.outcomes["started"] = len(tracked)
    verdict.outcomes["purged"] = int(numbers["purged"])
    for status, count in f.sql("SELECT status, COUNT(*) FROM tombstones GROUP BY status"):
        verdict.outcomes[str(status)] = verdict.outcomes.get(str(status), 0) + int(count)
    recovery = None
    if settled is not None and schedulers.last_death is not None:
        recovery = round(max(0.0, settled - schedulers.last_death), 2)
    return verdict, recovery


def _release_some(ctx: Ctx, tracked: dict[str, Tracked], watch: PurgeWatch, *, wait: bool = False) -> None:
    """Release half of the held runs that finished (the operator's CLI), noting when."""
    held = [r for r, t in tracked.items() if t.held and t.released_at is None]
    if wait:  # the last wave's held runs: let them finish first
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(_unfinished(watch, r) for r in held):
            time.sleep(0.1)
    done = [r for r in held if not _unfinished(watch, r)]
    for rid in done[: max(1, len(done) // 2)] if done else []:
        began = time.time()
        ctx.fleet.cli("runs", "release", rid, "--reason", "case closed", tenant="default")
        tracked[rid].released_at = time.time()
        tracked[rid].release_began = began
        ctx.count("holds released")


def _unfinished(watch: PurgeWatch, run_id: str) -> bool:
    seen = watch.seen.get(run_id)
    return seen is None or seen.finished is None


def _settle(ctx: Ctx, tracked: dict[str, Tracked], watch: PurgeWatch, tick: Any) -> float | None:
    """Wait until every run that can finish did, and its retention (or its hold's release) plus one
    purge period plus the restart allowance has passed; returns the monotonic time the purge was done
    (no due run stored, no tombstone unfinished), None if the deadline came first."""
    deadline = time.monotonic() + ctx.deadline_s
    while time.monotonic() < deadline and any(
        _unfinished(watch, r) for r, t in tracked.items() if t.can_finish
    ):
        tick()
        time.sleep(0.1)
    latest = max(
        [
            (watch.seen[r].finished_at or 0.0) + RETENTION_S[t.tenant]
            for r, t in tracked.items()
            if t.can_finish
        ]
        + [t.released_at or 0.0 for t in tracked.values()]
    )
    done_at: float | None = None
    while time.monotonic() < deadline:
        tick()
        purging = ctx.fleet.sql("SELECT COUNT(*) FROM tombstones WHERE state = 'purging'")[0][0]
        due = [
            r
            for r, t in tracked.items()
            if t.can_finish and t.tenant == "default" and not (t.held and t.released_at is None)
        ]
        stored = {str(x[0]) for x in ctx.fleet.sql("SELECT run_id FROM runs")}
        if done_at is None and not purging and not stored & set(due):
            done_at = time.monotonic()
        if time.time() > latest + PERIOD_S + ALLOWANCE_S + 0.5 and done_at is not None:
            break
        time.sleep(0.1)
    return done_at
