"""What the metrics cost per step (issue 17): the 3-activity process run in-process by one worker, in
quarters that alternate between the metrics observer attached (as in every process) and detached, on
one database; plus the observer's own time per step, measured around each call.

    .venv/bin/python -m lab.bench.observe [--runs 400] [--quarters 8] [--backends sqlite,postgresql]

Steps per second are noisy on a shared machine; the observer's own microseconds per step are not.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from lockstep.app.service import Service
from lockstep.core.events import Event
from lockstep.core.state import RunState
from lockstep.store import open_store
from lockstep.testing import PgCluster, find_pg_bin

from .lockstep_side import DEFINITION, STEPS

TTL = timedelta(seconds=30)


def _quarter(svc: Service, runs: int) -> float:
    """Steps per second of `runs` runs, each step claimed and completed by one worker, in batches."""
    svc.start_many("bench", DEFINITION["name"], [{"n": i} for i in range(runs)])
    t = time.perf_counter()
    done = 0
    leases = svc.claim("w", ["bench.noop"], limit=64, lease_ttl=TTL)
    while leases:
        reports = [svc.success_report(x.task_id, x.attempt, x.fencing, {"n": 1}) for x in leases]
        done += len(reports)
        _verdicts, leases = svc.report_and_claim(reports, "w", ["bench.noop"], limit=64, lease_ttl=TTL)
        if not leases:
            leases = svc.claim("w", ["bench.noop"], limit=64, lease_ttl=TTL)
    if done != runs * STEPS:
        raise RuntimeError(f"{done} steps done, {runs * STEPS} expected")
    return done / (time.perf_counter() - t)


def bench(label: str, url: str, runs: int, quarters: int) -> None:
    store = open_store(url)
    try:
        svc = Service(store)
        svc.principals.create_tenant("bench")
        svc.publish("bench", DEFINITION)
        spent = [0.0]
        observe = svc.metrics.observe

        def timed(before: RunState | None, after: RunState, events: list[Event]) -> None:
            t = time.perf_counter()
            observe(before, after, events)
            spent[0] += time.perf_counter() - t

        svc.kernel.observers.remove(observe)
        _quarter(svc, runs // 4)  # warm up
        on, off = [], []
        steps_on = 0
        for q in range(quarters):
            if q % 2 == 0:
                svc.kernel.observers.append(timed)
                on.append(_quarter(svc, runs))
                steps_on += runs * STEPS
                svc.kernel.observers.remove(timed)
            else:
                off.append(_quarter(svc, runs))
        m_on, m_off = statistics.median(on), statistics.median(off)
        print(f"\n{label}: {runs} runs x {STEPS} steps per quarter, {quarters} quarters")
        print(f"  steps/s with metrics {m_on:8.1f}   without {m_off:8.1f}   ({m_on / m_off:.1%})")
        per_step = spent[0] / steps_on * 1e6
        print(f"  the observer: {per_step:.1f} us per step ({per_step * m_on / 1e6:.2%} of a step's time)")
    finally:
        store.close()


@contextmanager
def _postgres() -> Iterator[str | None]:
    if find_pg_bin() is None:
        yield None
        return
    cluster = PgCluster().init().start()
    try:
        yield cluster.create_database("bench_observe")
    finally:
        cluster.destroy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--quarters", type=int, default=8)
    ap.add_argument("--backends", default="sqlite,postgresql")
    args = ap.parse_args()
    backends = args.backends.split(",")
    if "sqlite" in backends:
        with tempfile.TemporaryDirectory() as d:
            bench("SQLite", f"sqlite:///{d}/bench.db", args.runs, args.quarters)
    if "postgresql" in backends:
        with _postgres() as url:
            if url is None:
                print("\nPostgreSQL: server binaries not found, skipped")
            else:
                bench("PostgreSQL", url, args.runs, args.quarters)


if __name__ == "__main__":
    main()
