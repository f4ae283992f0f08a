"""The http step under lost answers: `http_lost_response`. Runs call the downstream payment API with
`http` steps (no activity code: lockstep's own workers send the requests), while the downstream applies
a quarter of the effects and then drops the connection without an answer, fails a tenth outright,
and one worker is SIGKILLed in the middle. Every attempt of a step sends the step's idempotency key,
so each retry after a lost answer gets the saved response instead of a second effect: the checker
finds every (run, step) effect applied once (`effects_duplicated`) and every success carrying the
effect of its own step (`effects_lost`). With `unsafe` (a new key per attempt: the broken build) the
retries charge again, and the checker must say so.

The downstream runs on loopback, so the fleet's processes run with the server setting
`egress_allow_loopback=1` and the tenant's policy allows exactly the downstream's URL prefix over
http with allow_loopback: the test-only path, set by the operator and the tenant admin together.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from .base import RETRY, Ctx, settle_time, start_runs
from .checker import Verdict

__all__ = ["http_lost_response", "http_pay_definition"]


def http_pay_definition(base: str) -> dict[str, Any]:
    """Charge, then ship: two effects downstream, each one http step, retried as activity steps are."""

    def call(step: str) -> dict[str, Any]:
        body = {"run_id": "${run.id}", "step": step, "amount": "${input.amount}"}
        http = {"method": "POST", "url": f"{base}/effects/{step}", "body": body, "timeout": "5s"}
        return {"id": step, "http": {**http, "retry": RETRY}}

    return {"name": "pay", "steps": [call("charge"), call("ship")]}


def http_lost_response(ctx: Ctx, *, unsafe: bool = False) -> tuple[Verdict, float | None]:
    f = ctx.fleet
    f.env["LOCKSTEP_LIMITS"] = "egress_allow_loopback=1"
    f.cli("tenants", "create", ctx.tenant, expect=None)  # it may exist already
    f.cli(
        "tenants",
        "egress",
        "set",
        ctx.tenant,
        "--allow",
        f"{f.downstream_url}/effects/",
        "--allow-http",
        "--allow-loopback",
    )
    f.engine.publish(http_pay_definition(f.downstream_url), tenant=ctx.tenant)
    f.control(drop_rate=0.25, fail_rate=0.1, seed=ctx.seed)
    f.scheduler("s1")
    faults = "unsafe.key_per_attempt=on" if unsafe else ""
    workers = {n: f.worker(f"w{n}", faults=faults) for n in (1, 2)}
    with ctx.monitor() as mon:
        start_runs(ctx, ctx.runs)
        t0 = time.monotonic()
        time.sleep(0.5)
        workers[1].kill()  # SIGKILL: its restart under the same id abandons its leases, retried at once
        ctx.count("workers SIGKILLed")
        workers[1] = f.worker("w1", faults=faults)
        settled = settle_time(ctx, t0)
    requests = f.ledger.requests()
    outcomes = Counter(r["outcome"] for r in requests)
    for kind in ("applied", "dropped", "failed", "replayed"):
        ctx.count(f"downstream {kind}", outcomes[kind])
    keys = Counter(r["idempotency_key"] for r in requests)
    ctx.count("idempotency keys sent more than once (retries)", sum(1 for n in keys.values() if n > 1))
    return ctx.verdict(monitor=mon), settled
