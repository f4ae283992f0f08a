"""Scenario `corrupt_history`: stored event bytes changed under a running fleet, and the scrub must find
them before the damaged runs move on.

A tenant of its own (`damaged`) has runs waiting on a 20 s timer; while the default tenant's runs go
through workers and schedulers, the driver changes one event of each of those runs in place (as a disk,
a bad restore or a hand-edit would: the append-only trigger bypassed), so that it still decodes but its
hash chain no longer holds. The fleet's schedulers scrub 50 runs a second (faultfleet.py). It fails
(`damage_missed`) if a damaged run is not marked within MARK_WITHIN_S or a command on it is not refused
with `corrupt_run`, and (`damaged_run_advanced`) if any event is appended to a damaged run, its timer's
included; the checker then checks the default tenant's runs as in every other scenario (the damaged
tenant is not theirs: its runs are damaged on purpose).
"""

from __future__ import annotations

import time

import psycopg

from lockstep.errors import LockstepError

from .base import Ctx, pay_definition, settle_time, start_runs
from .checker import Verdict
from .scenarios_corrupt_checks import CORRUPTION_CHECKS

__all__ = ["CORRUPTION_CHECKS", "MARK_WITHIN_S", "corrupt_history"]

MARK_WITHIN_S = 15.0
VICTIM = "damaged"
HOLD = {"name": "hold", "steps": [{"id": "nap", "wait": "20s"}, {"id": "done", "wait": "1ms"}]}
# seq 2 is TimerScheduled; another generation still decodes and replays, but is not what was chained.
CHANGE = ('"generation":2', '"generation":9')


def _damage(ctx: Ctx, run_ids: list[str]) -> None:
    """Change event seq 2 of each run in place, past the append-only trigger."""
    f = ctx.fleet
    update = "UPDATE events SET data = replace(data, ?, ?) WHERE run_id = ? AND seq = 2"
    if f.db_url.startswith("postgresql"):
        with psycopg.connect(f.db_url, autocommit=True) as pg:
            pg.execute("SET session_replication_role = replica")  # triggers off for this session only
            for run_id in run_ids:
                pg.execute(update.replace("?", "%s"), (*CHANGE, run_id))
        return
    (trigger,) = f.sql("SELECT sql FROM sqlite_master WHERE name = 'events_append_only_update'")[0]
    f.sql("DROP TRIGGER events_append_only_update")
    try:
        for run_id in run_ids:
            f.sql(update, (*CHANGE, run_id))
    finally:
        f.sql(str(trigger))


def _marked(ctx: Ctx, run_ids: list[str]) -> set[str]:
    rows = ctx.fleet.sql("SELECT run_id FROM runs WHERE damaged IS NOT NULL")
    return {str(r[0]) for r in rows} & set(run_ids)


def corrupt_history(ctx: Ctx, *, unsafe: bool = False) -> tuple[Verdict, float | None]:
    """Events of a victim tenant's waiting runs changed in place mid-load; the scrub marks each, every
    command on it is refused, none of them moves on, and the default tenant's runs are untouched.
    `unsafe`: the schedulers do not scrub (the broken build the checks must catch)."""
    f = ctx.fleet
    f.cli("tenants", "create", VICTIM)
    f.engine.publish(pay_definition(wait="200ms"), tenant=ctx.tenant)
    f.engine.publish(HOLD, tenant=VICTIM)
    for n in (1, 2):
        f.scheduler(f"s{n}", extra=("--scrub-interval", "0s") if unsafe else ())
        f.worker(f"w{n}")
    victims = [f.engine.start("hold", tenant=VICTIM) for _ in range(max(4, ctx.runs // 4))]
    with ctx.monitor() as mon:
        start_runs(ctx, ctx.runs)
        t0 = time.monotonic()
        _damage(ctx, victims)
        damaged_at = time.monotonic()
        ctx.count("event rows changed in place", len(victims))
        while time.monotonic() - damaged_at < MARK_WITHIN_S and len(_marked(ctx, victims)) < len(victims):
            time.sleep(0.1)
        marked = _marked(ctx, victims)
        ctx.injected["seconds until every damaged run was marked"] = round(time.monotonic() - damaged_at, 2)
        settled = settle_time(ctx, t0)
        # Past the victims' 20 s timer: a damaged run the scrub missed would have fired it by now.
        time.sleep(max(0.0, 23.0 - (time.monotonic() - damaged_at)))
    verdict = ctx.verdict(monitor=mon)
    for run_id in victims:
        if run_id not in marked:
            verdict.flag("damage_missed", f"run {run_id} not marked {MARK_WITHIN_S:.0f} s after its damage")
            continue
        try:
            f.engine.cancel(run_id, reason="is it refused?", tenant=VICTIM)
        except LockstepError as exc:
            if exc.code == "corrupt_run":
                ctx.count("commands on damaged runs refused (corrupt_run)")
            else:
                verdict.flag("damage_missed", f"cancel of damaged run {run_id} refused as {exc.code}")
        else:
            verdict.flag("damage_missed", f"cancel of damaged run {run_id} was accepted")
    seqs = f.sql(
        "SELECT run_id, MAX(seq) FROM events WHERE run_id IN (SELECT run_id FROM runs WHERE tenant = ?)"
        " GROUP BY run_id",
        (VICTIM,),
    )
    for run_id, top in seqs:
        if int(top) > 2:
            verdict.flag("damaged_run_advanced", f"damaged run {run_id} has {top} events (2 when damaged)")
    return verdict, settled
