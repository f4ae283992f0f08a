"""Traces under crashes: `traced_crashes` runs `crash_after_commit`'s faults (workers SIGKILLed at
every point of an attempt, the scheduler in the middle of firing a timer or expiring a lease) with every
process exporting its spans over OTLP/HTTP to a real receiver on loopback, half the runs started in a
caller's trace and half in traces of their own. The checker (tracecheck.py) then demands one trace per
run whose spans are exactly those its history implies; a span may be missing only if a process was
SIGKILLed within its batch delay (plus the export's time) after the span ended, and `lockstep trace
RUN --export` must then fill in every one.
"""

from __future__ import annotations

import signal
import time

from lockstep.core.events import Event

from ..fleet import Proc
from ..fleet.otlp import OtlpReceiver
from .base import Ctx, Supervisor, pay_definition, settle_time
from .checker import Verdict
from .scenarios import CRASH_POINTS
from .tracecheck import check_spans, missing_after

__all__ = ["traced_crashes"]

BATCH_DELAY_MS = 100
# How long after a span's end its process may die and take it along: the batch delay, the export's
# own time and the gap between the commit's timestamp and the listener (generous on a loaded machine).
LOSS_WINDOW_S = BATCH_DELAY_MS / 1000 + 2.0
CALLER = "00-{trace}-{span}-01"


def traced_crashes(ctx: Ctx) -> tuple[Verdict, float | None]:
    """Workers and the scheduler SIGKILLed at their crash points while every process traces."""
    f = ctx.fleet
    receiver = OtlpReceiver().start()
    try:
        f.env.update(receiver.env(service="lockstep-faults", schedule_delay_ms=BATCH_DELAY_MS))
        return _drive(ctx, receiver)
    finally:
        receiver.stop()


def _drive(ctx: Ctx, receiver: OtlpReceiver) -> tuple[Verdict, float | None]:
    f = ctx.fleet
    f.engine.publish(pay_definition(wait="50ms"), tenant=ctx.tenant)
    budget = max(3, ctx.runs // 4)

    def faults(n: int) -> str:
        return "" if n > budget else f"{ctx.rng.choice(CRASH_POINTS)}=kill@{ctx.rng.randint(1, 4)}"

    sched = Supervisor(
        1,
        lambda n: f.scheduler(f"s{n}", faults="commit.FireTimer=kill@3" if n == 1 else "", wait=n != 1),
    )
    workers = Supervisor(2, lambda n: f.worker(f"w{n}", faults=(spec := faults(n)), wait=not spec))

    def tick() -> None:
        workers.tick()
        sched.tick()

    run_ids = []
    for i in range(ctx.runs):
        parent = None
        if i % 2 == 0:  # half in a caller's trace, half in traces of their own
            parent = CALLER.format(trace=f"{ctx.rng.getrandbits(128) | 1:032x}", span=f"{i + 1:016x}")
        run_ids.append(
            f.engine.start(
                "pay", input={"amount": 100 + i, "ref": f"r{i}"}, tenant=ctx.tenant, traceparent=parent
            )
        )
    t0 = time.monotonic()
    with ctx.monitor() as mon:
        settled = settle_time(ctx, t0, tick=tick)
    kills = [float(h["at"]) for h in f.failpoint_hits() if h.get("action") == "kill"]
    ctx.count("processes SIGKILLed at a crash point", len(kills))
    _stop_gracefully([*workers.procs, *sched.procs])  # the survivors export what their batches hold
    verdict = ctx.verdict(monitor=mon)
    histories = _histories(ctx, run_ids)
    missing = check_spans(histories, receiver.received(), verdict)
    explained, unexplained = missing_after(missing, kills, LOSS_WINDOW_S)
    ctx.count("spans received", len(receiver.received()))
    ctx.count("spans lost to a SIGKILL (within the batch delay)", len(explained))
    for x in unexplained:
        verdict.flag("spans_lost", f"{x.run_id}: {x.name} ({x.span_id}) ended with no kill after it")
    _recover(ctx, receiver, {x.run_id for x in explained}, histories, verdict)
    return verdict, settled


def _stop_gracefully(procs: list[Proc]) -> None:
    for p in procs:
        p.signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(30)
        except Exception:
            p.kill()


def _histories(ctx: Ctx, run_ids: list[str]) -> dict[str, list[Event]]:
    out = {}
    with ctx.engine_service.read() as tx:
        for rid in run_ids:
            out[rid] = [e for e, _ in tx.events(rid)]
    return out


def _recover(
    ctx: Ctx, receiver: OtlpReceiver, runs: set[str], histories: dict[str, list[Event]], v: Verdict
) -> None:
    """`lockstep trace RUN --export` for every run that lost spans: afterwards none may be missing, and
    what was sent again must be what was first sent (same ids, same contents)."""
    for rid in sorted(runs):
        ctx.fleet.cli("trace", rid, "--export", tenant=ctx.tenant)
        ctx.count("runs whose spans were sent again (lockstep trace --export)")
    if not runs:
        return
    mine = [s for s in receiver.received() if s.attributes.get("lockstep.run_id") in runs]
    again = check_spans({rid: histories[rid] for rid in runs}, mine, v)
    for rid, spans in again.items():
        for x in spans:
            v.flag("spans_lost", f"{rid}: {x.name} ({x.span_id}) still missing after lockstep trace --export")
