"""Encryption keys under faults: `rotate_under_load` rotates a tenant's data key twice while runs whose
inputs are sealed go through workers that are SIGKILLed and restarted, and a scheduler dies in the middle
of a re-wrap batch (written, not committed). Every run must finish with its own values, each activity
must have been given the clear value, every run key must end on the newest version and the older
versions must be gone.

The definition declares `amount` sensitive (`x-lockstep-sensitive`), so every process of the fleet seals
it (driver, workers, schedulers).
"""

from __future__ import annotations

import time
from typing import Any

from lockstep.app.keys import KEY_FILE_ENV, create_key_file
from lockstep.app.principals import Principal
from lockstep.core.events import ActivitySucceeded
from lockstep.engine import Engine

from ..fleet import wait_until
from .base import Ctx, Supervisor, pay_definition, settle_time
from .checker import Verdict

__all__ = ["rotate_under_load"]


def _definition() -> dict[str, Any]:
    doc = pay_definition(wait="100ms")
    doc["input_schema"] = {
        "type": "object",
        "properties": {
            "amount": {"type": "integer", "x-lockstep-sensitive": True},
            "ref": {"type": "string"},
        },
    }
    return doc


def _rotated(engine: Engine, tenant: str, version: int) -> bool:
    (t,) = engine.service.keys.status(tenant).tenants
    return [v.version for v in t.versions] == [version] and t.rewrap_pending == 0


def rotate_under_load(ctx: Ctx) -> tuple[Verdict, float | None]:
    """Two rotations while sealed runs go through workers SIGKILLed at random; the first scheduler dies
    inside its first re-wrap batch and another takes over."""
    f = ctx.fleet
    key = f.dir / "lockstep.key"
    create_key_file(key)
    f.env[KEY_FILE_ENV] = str(key)  # every worker, scheduler and CLI of the fleet has the key
    engine = Engine.open(f.db_url, keys=key)
    try:
        return _drive(ctx, engine)
    finally:
        engine.close()


def _drive(ctx: Ctx, engine: Engine) -> tuple[Verdict, float | None]:
    f = ctx.fleet
    engine.publish(_definition(), tenant=ctx.tenant)
    workers = Supervisor(3, lambda n: f.worker(f"w{n}", scheduler=False))
    schedulers = Supervisor(2, lambda n: f.scheduler(f"s{n}", faults="keys.rewrap=kill@1" if n == 1 else ""))

    def tick() -> None:
        workers.tick()
        schedulers.tick()

    amounts: dict[str, int] = {}
    rounds = 4
    with ctx.monitor() as mon:
        for r in range(rounds):
            for i in range(ctx.runs // rounds):
                n = r * 1000 + i
                run_id = engine.start("pay", input={"amount": 100 + n, "ref": f"r{n}"}, tenant=ctx.tenant)
                amounts[run_id] = 100 + n
            if r in (1, 2):
                f.cli("keys", "rotate", "--tenant", ctx.tenant)
                ctx.count("rotations")
            victim = ctx.rng.choice(workers.procs)
            time.sleep(ctx.rng.uniform(0.05, 0.4))
            victim.kill()
            ctx.count("workers SIGKILLed")
            tick()
        t0 = time.monotonic()
        settled = settle_time(ctx, t0, tick=tick)

        def rotated() -> bool:
            tick()
            return _rotated(engine, ctx.tenant, 3)

        try:
            wait_until(rotated, ctx.deadline_s, "every run key on version 3 and the old versions gone")
            rewrapped = True
        except Exception:
            rewrapped = False
    ctx.count("schedulers died", schedulers.deaths)
    v = ctx.verdict(monitor=mon)
    if not rewrapped:
        (t,) = engine.service.keys.status(ctx.tenant).tenants
        v.flag(
            "keys_lost",
            f"rotation unfinished: versions {[x.version for x in t.versions]}, {t.rewrap_pending} pending",
        )
    _check_values(engine, ctx.tenant, amounts, v)
    return v, settled


def _check_values(engine: Engine, tenant: str, amounts: dict[str, int], v: Verdict) -> None:
    """Each run's sealed amount opens to its own value, and its charge was given that value in clear."""
    checker = Principal(tenant, "faults-checker", ("viewer",), (), 0, ("read_sensitive",))
    svc = engine.service
    for run_id, amount in amounts.items():
        try:
            shown = svc.reveal.run(checker, run_id, channel="faults")
        except Exception as exc:
            v.flag("keys_lost", f"{run_id}: {type(exc).__name__}: {exc}")
            continue
        if shown.input.get("amount") != amount:
            v.flag("keys_lost", f"{run_id}: input amount {shown.input.get('amount')!r}, expected {amount}")
        with svc.read() as tx:
            given = [
                e.data.output.get("amount")
                for e, _h in tx.events(run_id)
                if isinstance(e.data, ActivitySucceeded)
                and e.data.step == "charge"
                and isinstance(e.data.output, dict)
            ]
        if any(g != amount for g in given):
            v.flag("keys_lost", f"{run_id}: the charge was given {given!r}, not {amount}")
