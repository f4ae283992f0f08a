"""Retention and key rotation under load: `purge_under_load`. Runs whose inputs and charge outputs are
sealed start, finish, wait for people and get legal holds in waves while two schedulers purge with a
retention of seconds and tenant `default`'s data key is rotated twice (`lockstep keys rotate`); the
schedulers SIGKILL themselves in the middle of purges (inside a delete transaction, right after a batch
of tombstones) and inside re-wrap batches (written, not committed), and are restarted.

Tenant `default` keeps finished runs 2 s; some runs are held from the moment they start (half of those
released once they finished), some wait for an approval that never comes (they cannot finish). Tenant
`vault` keeps finished runs 1 s but is under a tenant hold all along. The key file is made with
`lockstep keys init`; the run inputs' `amount` and `card` and the charge's output `amount` are
sensitive. The checker (purgecheck.py and sealing.py, on top of checker.py for the runs still stored)
then requires: nothing unfinished lost, nothing held purged, nothing purged early, every finished
unheld run gone with a complete tombstone once its retention plus one purge period (plus the allowance
for a killed scheduler's restart) has passed, and everything still stored verified; every stored run's
sealed values open to exactly what it was started with (and its charge output to what the activity
produced), every charge applied downstream was sent the clear amount, the rotation finished (every run
key on the newest version, the older versions gone), a purged run left neither its key row nor any of
its sealed values anywhere, and no purge or re-wrap pass deadlocked or failed but for a lost race
(those are counted).
"""

from __future__ import annotations

import time
from contextlib import suppress
from typing import Any

from lockstep.errors import LockstepError

from ..fleet import Proc
from .base import Ctx, Supervisor, pay_definition
from .checker import Expect, Verdict
from .purgecheck import PurgeWatch, Tracked, check_processes, check_purge, check_sealed
from .sealing import Rotator, Started, check_given, check_values, init_keys, sealed_definition, wait_rotated

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
ROTATE_AT = (1, 3)  # the waves at whose start tenant default's key is rotated


def purge_under_load(ctx: Ctx) -> tuple[Verdict, float | None]:
    """Waves of sealed runs (finishing, held, waiting for people) while killed-and-restarted schedulers
    purge and re-wrap run keys after two rotations."""
    f = ctx.fleet
    init_keys(f)
    # Set up in-process (each CLI command costs a second of start-up): the operator's commands under
    # test are `keys init`, `keys rotate` and `runs release`.
    accounts, retention = f.engine.service.principals, f.engine.service.retention
    with suppress(LockstepError):  # "default" may exist already
        accounts.create_tenant("default")
    accounts.create_tenant("vault")
    accounts.create_user("default", "alice", ["approver"], [])
    f.engine.publish(sealed_definition(pay_definition(wait="200ms"), output=True), tenant="default")
    long = pay_definition("long", wait="10ms", extra=[APPROVAL])
    f.engine.publish(sealed_definition(long, output=True), tenant="default")
    f.engine.publish(sealed_definition(pay_definition(wait="10ms"), output=True), tenant="vault")
    for tenant, keep in RETENTION_S.items():
        accounts.set_tenant(tenant, retention=keep)
    retention.hold_tenant("vault", "regulator inquiry 2025-3", "driver")
    ctx.count("tenant holds", 1)
    faults = _scheduler_faults(ctx)

    def scheduler(n: int) -> Proc:
        spec = faults[n - 1] if n <= len(faults) else ""
        extra = ["--purge-interval", f"{int(PERIOD_S * 1000)}ms", "--purge-batch", "10"]
        return f.scheduler(f"s{n}", extra=extra, faults=spec, wait=not spec)

    schedulers = Supervisor(2, scheduler)
    workers = Supervisor(2, lambda n: f.worker(f"w{n}"))
    tracked: dict[str, Tracked] = {}
    started: dict[str, Started] = {}
    rotator = Rotator(ctx, "default")
    per_wave = max(3, ctx.runs // WAVES)
    n = 0

    def start(name: str, tenant: str, amount: int, ref: str) -> str:
        doc = {"amount": amount, "card": f"CARD-{ctx.seed}-{ref}", "ref": ref}
        rid = f.engine.start(name, input=doc, tenant=tenant)
        started[rid] = Started(tenant, doc)
        return rid

    def tick() -> None:
        schedulers.tick()
        workers.tick()

    with ctx.monitor() as mon, PurgeWatch(f) as watch:
        for wave in range(WAVES):
            if wave in ROTATE_AT:  # in a thread: runs start, finish and are purged meanwhile
                rotator.start()
            for _ in range(per_wave):
                rid = start("pay", "default", 100 + n, f"r{n}")
                tracked[rid] = Tracked("default")
                if ctx.rng.random() < 0.25:  # held while it still runs
                    f.engine.service.retention.hold_run("default", rid, f"case {n}", "driver")
                    tracked[rid].held = True
                    ctx.count("runs held while running")
                n += 1
            tracked[start("long", "default", 1, f"long{wave}")] = Tracked("default", can_finish=False)
            tracked[start("pay", "vault", 2, f"vault{wave}")] = Tracked("vault")
            if wave == WAVES // 2:
                _release_some(ctx, tracked, watch)
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                tick()
                time.sleep(0.05)
            rotator.join()
        _release_some(ctx, tracked, watch, wait=True)
        settled = _settle(ctx, tracked, watch, tick)
        unrotated = wait_rotated(ctx, "default", rotator.version, tick=tick)
    ctx.count("schedulers SIGKILLed (restarted)", schedulers.deaths)
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
    numbers |= _check_sealed_runs(ctx, tracked, started, watch, rotator, unrotated, verdict)
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


def _scheduler_faults(ctx: Ctx) -> list[str]:
    """The fail points of the first schedulers: the first dies in a purge, the second inside its first
    re-wrap batch after the first rotation, the third in whichever comes first, the fourth in a re-wrap
    after the second rotation (it starts once the first is over); the rest run clean."""
    purge = [f"{ctx.rng.choice(KILL_POINTS)}=kill@{ctx.rng.randint(1, 3)}" for _ in range(2)]
    rewrap = "keys.rewrap=kill@1"
    return [purge[0], rewrap, f"{purge[1]};{rewrap}", rewrap]


def _check_sealed_runs(
    ctx: Ctx,
    tracked: dict[str, Tracked],
    started: dict[str, Started],
    watch: PurgeWatch,
    rotator: Rotator,
    unrotated: str | None,
    v: Verdict,
) -> dict[str, Any]:
    """The key checks: the stored runs' values, the charges sent, the rotation, what purged runs left."""
    f = ctx.fleet
    for problem in [*rotator.failed, *([unrotated] if unrotated else [])]:
        v.flag("keys_lost", problem)
    stored = {str(r[0]) for r in f.sql("SELECT run_id FROM runs")}
    hits = f.failpoint_hits()
    killed = {int(h["pid"]) for h in hits if h["action"] == "kill"}
    rewraps = [h for h in hits if h["point"] == "keys.rewrap"]
    return {
        "key version": rotator.version,
        "stored runs opened": check_values(f.engine, {r: s for r, s in started.items() if r in stored}, v),
        "charges sent in clear (all runs)": check_given(f.ledger, started, v),
        "SIGKILLed in a re-wrap batch": len(rewraps),
        "... of them with run keys written": sum(1 for h in rewraps if h["moved"]),
        "SIGKILLed in a purge": sum(1 for h in hits if str(h["point"]).startswith("purge.")),
        **check_sealed(f, tracked, watch, v),
        **check_processes(f.procs, killed, v),
    }


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
