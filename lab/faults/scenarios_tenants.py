"""Scenarios where one tenant attacks the others: a hostile tenant admin against a victim tenant's runs.

`hostile_tenant`: a real `lockstep serve`, scheduler and workers; a victim tenant's client starts runs
over HTTP one after another and times each start, in rounds, alternately alone and while a hostile
tenant admin (its own process, `faults/hostile.py`) keeps sending every request that once crashed or
stalled the server. The hostile process is paused (SIGSTOP) during the victim's baseline rounds, so
the two conditions are measured side by side in one run, interleaved.

It fails (violations) if any process of the fleet died, if the server answered any hostile request with
a 5xx or dropped it, if a victim start failed, or if the victim's p99 start latency under attack is more
than twice its p99 alone; the checker then checks the victim's runs as in every other scenario.
"""

from __future__ import annotations

import json
import signal
import statistics
import sys
import time
from typing import Any

import httpx

from ..fleet import free_port
from .base import Ctx, pay_definition, settle_time
from .checker import Expect, Verdict
from .scenarios_ops import _user

__all__ = ["MAX_LATENCY_RATIO", "hostile_tenant"]

MAX_LATENCY_RATIO = 2.0
ROUNDS = 4


def _p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def hostile_tenant(ctx: Ctx) -> tuple[Verdict, float | None]:
    """A victim tenant starts runs over HTTP, timed, alternately alone and under a hostile tenant's
    bombs (alias bombs, parser-overflowing and quadratic expressions, huge and deep inputs and documents)."""
    f = ctx.fleet
    victim = ctx.tenant = "victim"
    for tenant in (victim, "hostile"):
        f.cli("tenants", "create", tenant)
    vkey = _user(ctx, "app", "operator", victim)
    hkey = _user(ctx, "evil", "admin", "hostile")
    f.engine.publish(pay_definition(wait="10ms"), tenant=victim)
    port = free_port()
    f.serve("serve1", port)
    base = f"http://127.0.0.1:{port}"
    f.scheduler("s1")
    for k in (1, 2):
        f.worker(f"w{k}")
    report = f.dir / "hostile.json"
    attacker = f.popen(
        "hostile", [sys.executable, "-m", "lab.faults.hostile", base, hkey, str(report)], f.env
    )
    f.wait_ready(attacker, "attacking", timeout=60)
    attacker.signal(signal.SIGSTOP)
    # At least 300 samples per condition: a p99 of fewer is its second-largest sample, one stall of a
    # loaded machine (the CI of 6b6dbfe: 2.29x) rather than the server under attack.
    per_round = max(75, ctx.runs * 3)
    latencies: dict[str, list[float]] = {"alone": [], "attacked": []}
    failed_starts = 0
    n = 0
    t0 = time.monotonic()
    with ctx.monitor() as mon, httpx.Client(base_url=base, timeout=30) as client:
        headers = {"Authorization": f"Bearer {vkey}"}
        for r in range(ROUNDS * 2):
            condition = "attacked" if r % 2 else "alone"
            attacker.signal(signal.SIGCONT if condition == "attacked" else signal.SIGSTOP)
            if condition == "attacked":
                time.sleep(0.5)  # let the attacker get going: the round measures a server under attack
            for _ in range(per_round):
                body = {"definition": "pay", "input": {"amount": 100 + n, "ref": f"r{n}"}}
                began = time.perf_counter()
                try:
                    resp = client.post(
                        "/v1/runs", json=body, headers={**headers, "Idempotency-Key": f"start-{n}"}
                    )
                    ok = resp.status_code in (200, 201)
                except httpx.HTTPError:
                    ok = False
                latencies[condition].append(time.perf_counter() - began)
                failed_starts += not ok
                n += 1
        attacker.signal(signal.SIGCONT)
        attacker.popen.terminate()
        attacker.wait(30)
        settled = settle_time(ctx, t0)
    verdict = ctx.verdict(Expect(tenant=victim), mon)
    hostile: dict[str, Any] = json.loads(report.read_text()) if report.exists() else {}
    hostile.setdefault("rounds", 0)
    hostile.setdefault("counts", {})
    server_errors = 0
    for what, count in sorted(hostile["counts"].items()):
        ctx.count(f"hostile {what}", count)
        status = what.rsplit(" ", 1)[1]
        if not status.isdigit() or int(status) >= 500:
            server_errors += count
    ctx.count("hostile rounds", hostile["rounds"])
    alone, attacked = _p99(latencies["alone"]), _p99(latencies["attacked"])
    ratio = attacked / alone if alone > 0 else float("inf")
    ctx.injected["victim start p99 ms alone"] = round(alone * 1000, 1)
    ctx.injected["victim start p99 ms attacked"] = round(attacked * 1000, 1)
    ctx.injected["victim start p50 ms alone"] = round(statistics.median(latencies["alone"]) * 1000, 1)
    ctx.injected["victim start p50 ms attacked"] = round(statistics.median(latencies["attacked"]) * 1000, 1)
    ctx.injected["p99 ratio attacked/alone"] = round(ratio, 2)
    dead = [p.name for p in f.procs if p is not attacker and not p.alive()]
    if dead:
        verdict.flag("process_died", f"{', '.join(dead)} died during the attack")
    if server_errors:
        verdict.flag("server_errors", f"{server_errors} hostile requests answered 5xx or dropped")
    if failed_starts:
        verdict.flag("isolation_breached", f"{failed_starts} of the victim's {n} starts failed")
    if ratio > MAX_LATENCY_RATIO:
        verdict.flag(
            "isolation_breached",
            f"victim p99 start latency {attacked * 1000:.1f} ms under attack vs {alone * 1000:.1f} ms "
            f"alone: {ratio:.2f}x (limit {MAX_LATENCY_RATIO}x)",
        )
    return verdict, settled
