"""Encryption keys under faults: `rotate_under_load` rotates a tenant's data key twice while runs whose
inputs are sealed go through workers that are SIGKILLed and restarted, and a scheduler dies in the middle
of a re-wrap batch (written, not committed). Every run must finish with its own values, each activity
must have been given the clear value, every run key must end on the newest version and the older
versions must be gone.

The definition declares `amount` and `card` sensitive (`x-lockstep-sensitive`), so every process of the
fleet seals them (driver, workers, schedulers); the key file is made with `lockstep keys init`. The
checks are sealing.py's, shared with `purge_under_load`.
"""

from __future__ import annotations

import time

from .base import Ctx, Supervisor, pay_definition, settle_time
from .checker import Verdict
from .sealing import Rotator, Started, check_given, check_values, init_keys, sealed_definition, wait_rotated

__all__ = ["rotate_under_load"]


def rotate_under_load(ctx: Ctx) -> tuple[Verdict, float | None]:
    """Two rotations while sealed runs go through workers SIGKILLed at random; the first scheduler dies
    inside its first re-wrap batch and another takes over."""
    f = ctx.fleet
    init_keys(f)  # every worker, scheduler and CLI of the fleet has the key
    f.engine.publish(sealed_definition(pay_definition(wait="100ms")), tenant=ctx.tenant)
    workers = Supervisor(3, lambda n: f.worker(f"w{n}", scheduler=False))
    schedulers = Supervisor(2, lambda n: f.scheduler(f"s{n}", faults="keys.rewrap=kill@1" if n == 1 else ""))

    def tick() -> None:
        workers.tick()
        schedulers.tick()

    started: dict[str, Started] = {}
    rotator = Rotator(ctx, ctx.tenant)
    rounds = 4
    with ctx.monitor() as mon:
        for r in range(rounds):
            for i in range(ctx.runs // rounds):
                n = r * 1000 + i
                doc = {"amount": 100 + n, "card": f"CARD-{ctx.seed}-{n}", "ref": f"r{n}"}
                run_id = f.engine.start("pay", input=doc, tenant=ctx.tenant)
                started[run_id] = Started(ctx.tenant, doc)
            if r in (1, 2):
                rotator.start()
                rotator.join()
            victim = ctx.rng.choice(workers.procs)
            time.sleep(ctx.rng.uniform(0.05, 0.4))
            victim.kill()
            ctx.count("workers SIGKILLed")
            tick()
        t0 = time.monotonic()
        settled = settle_time(ctx, t0, tick=tick)
        unrotated = wait_rotated(ctx, ctx.tenant, rotator.version, tick=tick)
    ctx.count("schedulers died", schedulers.deaths)
    v = ctx.verdict(monitor=mon)
    for problem in [*rotator.failed, *([unrotated] if unrotated else [])]:
        v.flag("keys_lost", problem)
    check_values(f.engine, started, v)
    check_given(f.ledger, started, v)
    return v, settled
