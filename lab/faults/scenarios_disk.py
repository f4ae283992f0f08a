"""The database's disk fills up under load (SQLite on its own small tmpfs; the run matrix mounts it, see
Scenario.disk): starts and the processes' writes fail as `unavailable` while it is full, no process
dies, and once the filler file is deleted every run settles; the checker then reads the whole history
(every acknowledged start there, every effect once), and SQLite's integrity_check must pass."""

from __future__ import annotations

import time

from lockstep.errors import Unavailable

from ..fleet import sqlite_path, wait_until
from ..fleet.mounts import fill
from .base import Ctx, Supervisor, pay_definition, settle_time, start_runs
from .checker import Verdict

__all__ = ["disk_full"]


def disk_full(ctx: Ctx) -> tuple[Verdict, float | None]:
    """Mid-load a filler file takes every free byte of the database's disk for 2 s (10 s in a soak)
    while the driver keeps starting runs; then it is deleted, with no process restarted."""
    f = ctx.fleet
    f.engine.publish(pay_definition(), tenant=ctx.tenant)
    sched = Supervisor(1, lambda n: f.scheduler(f"s{n}"))
    workers = Supervisor(2, lambda n: f.worker(f"w{n}"))
    full_s = 2.0 if not ctx.soak else 10.0

    def tick() -> None:
        workers.tick()
        sched.tick()

    with ctx.monitor() as mon:
        start_runs(ctx, ctx.runs // 2)
        wait_until(f.ledger.effects, 30, "the first effects")
        filler = fill(sqlite_path(f.db_url).parent)
        ctx.count("disk filled")
        refused = acknowledged = 0
        end = time.monotonic() + full_s
        while time.monotonic() < end:
            n = refused + acknowledged
            try:
                f.engine.start("pay", input={"amount": 500 + n, "ref": f"full{n}"}, tenant=ctx.tenant)
                acknowledged += 1
            except Unavailable:
                refused += 1
                time.sleep(0.02)
            tick()
        filler.unlink()
        back = time.monotonic()
        ctx.count("starts refused as unavailable while full", refused)
        ctx.count("starts acknowledged while full", acknowledged)
        if refused == 0:
            raise AssertionError("the disk never filled up: no start was refused")
        for n in range(ctx.runs - ctx.runs // 2):  # after freeing: the same processes take them on
            f.engine.start("pay", input={"amount": 900 + n, "ref": f"after{n}"}, tenant=ctx.tenant)
        settled = settle_time(ctx, back, tick=tick)
    ctx.count("processes that exited while the disk was full", workers.deaths + sched.deaths)
    check = f.sql("PRAGMA integrity_check")
    if check != [("ok",)]:
        raise AssertionError(f"integrity_check after the disk was full: {check}")
    return ctx.verdict(monitor=mon), settled
