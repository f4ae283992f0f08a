"""Schedules under faults: `schedules_under_faults`. Three schedules of the payment definition fire every
one, two and three seconds (one created with the CLI, as an operator would) while two schedulers run;
the first schedulers SIGKILL themselves at fire points (the run's start written but not the schedule's
advance, the advance written but not committed, inside the start's commit, right after the commit) and
are restarted; in the middle the database goes away for two seconds (PostgreSQL stopped with
`pg_ctl stop -m immediate`; on SQLite a process holding the write lock is SIGKILLed); workers run the
charges against the downstream. Then the schedules are paused and the runs settle.

The policies differ on purpose: `every` (overlap allow, catch-up all) must start each slot; `pairs`
(overlap skip, catch-up last) may skip a slot while its previous run is unfinished and miss the older
slots of a backlog; `threes` (overlap allow, catch-up none) may miss only what a pass found late or
older than the most recent due slot. The checker (schedcheck.py, on top of checker.py's checks of every
run) requires each due slot to have exactly one run by start key, none early, none missed beyond what
its policies allow. The broken build (`unsafe.schedule_no_advance`: a fire that does not move the
schedule on, with a start key of its own) must be caught.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass

from lockstep.core.timeutil import parse_iso
from lockstep.errors import LockstepError

from ..fleet import Proc, sqlite_path
from .base import Ctx, Supervisor, pay_definition, settle_time
from .checker import Verdict
from .scenarios_ops import SQLITE_LOCKER
from .schedcheck import Watched, check_schedules

__all__ = ["schedules_under_faults"]

KILL_POINTS = ("schedule.started", "schedule.advanced", "commit.StartRun", "schedule.committed")
OUTAGE_S = 2.0


@dataclass(frozen=True)
class Plan:
    name: str
    cron: str
    overlap: str
    catch_up: str


PLANS = (
    Plan("every", "* * * * * *", "allow", "all"),
    Plan("pairs", "*/2 * * * * *", "skip", "last"),
    Plan("threes", "*/3 * * * * *", "allow", "none"),
)


def schedules_under_faults(ctx: Ctx, *, unsafe: bool = False) -> tuple[Verdict, float | None]:
    f = ctx.fleet
    accounts = f.engine.service.principals
    with suppress(LockstepError):  # "default" may exist already
        accounts.create_tenant(ctx.tenant)
    accounts.set_tenant(ctx.tenant, max_schedule_rate=3600)
    f.engine.publish(pay_definition(wait="50ms"), tenant=ctx.tenant)
    f.control(delay_ms=10)
    watched = [_create(ctx, p, cli=i == 0) for i, p in enumerate(PLANS)]
    faults = [f"{p}=kill@{ctx.rng.randint(1, 4)}" for p in ctx.rng.sample(KILL_POINTS, 3)]
    broken = "unsafe.schedule_no_advance=on" if unsafe else ""

    def scheduler(n: int) -> Proc:
        spec = ";".join(x for x in (faults[n - 1] if n <= len(faults) else "", broken) if x)
        return f.scheduler(f"s{n}", faults=spec, wait=not spec)

    schedulers = Supervisor(2, scheduler)
    workers = Supervisor(2, lambda n: f.worker(f"w{n}", scheduler=False))

    def tick() -> None:
        schedulers.tick()
        workers.tick()

    firing_s = 24.0 if ctx.soak else 10.0
    with ctx.monitor() as mon:
        _for(firing_s / 2, tick)
        _outage(ctx)
        _for(firing_s / 2, tick)
        for p in PLANS:  # from here on nothing new falls due; what was due is in [first, next)
            f.cli("schedules", "pause", p.name, "--reason", "scenario over", tenant=ctx.tenant)
        settled = settle_time(ctx, time.monotonic(), tick=tick)
    ctx.count("schedulers SIGKILLed (restarted)", schedulers.deaths)
    verdict = ctx.verdict(monitor=mon, refs=True)
    for what, value in check_schedules(f, ctx.tenant, watched, verdict).items():
        ctx.injected[what] = value
    hits = f.failpoint_hits()
    ctx.count("SIGKILLed at a fire point", sum(1 for h in hits if h["action"] == "kill"))
    recovery = None
    if settled is not None and schedulers.last_death is not None:
        recovery = settled
    return verdict, recovery


def _create(ctx: Ctx, p: Plan, *, cli: bool) -> Watched:
    f = ctx.fleet
    limit = 100
    if cli:
        made = f.cli_json(
            "schedules", "create", p.name, "--definition", "pay", "--cron", p.cron, "--overlap", p.overlap,
            "--catch-up", p.catch_up, "--catch-up-limit", str(limit), "--input", '{"amount": 1}',
            tenant=ctx.tenant,
        )  # fmt: skip
        first = str(made["next_fire_at"])
    else:
        view = f.engine.service.schedules.create(
            ctx.tenant, p.name, definition="pay", cron=p.cron, overlap=p.overlap, catch_up=p.catch_up,
            catch_up_limit=limit, input={"amount": 2}, actor="driver",
        )  # fmt: skip
        first = str(view.next_fire_at)
    return Watched(p.name, p.cron, p.overlap, p.catch_up, limit, int(parse_iso(first).timestamp() * 1000))


def _for(seconds: float, tick: Callable[[], None]) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        tick()
        time.sleep(0.1)


def _outage(ctx: Ctx) -> None:
    f = ctx.fleet
    if f.backend == "postgresql" and f.pg is not None:
        f.pg.stop("immediate")
        time.sleep(OUTAGE_S)
        f.pg.start()
        ctx.count("PostgreSQL stopped (immediate)")
        return
    locker = subprocess.Popen(  # noqa: S603 - our own script
        [sys.executable, "-c", SQLITE_LOCKER, str(sqlite_path(f.db_url))],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    if locker.stdout is not None:
        locker.stdout.readline()  # the lock is held from here on
    time.sleep(OUTAGE_S)
    locker.kill()
    locker.wait(10)
    if locker.stdout is not None:
        locker.stdout.close()
    ctx.count("SQLite writer SIGKILLed inside a transaction")
