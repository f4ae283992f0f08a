"""What one /metrics scrape costs with many runs in flight, on both backends (issue 17).

    .venv/bin/python -m lab.bench.scrape [--waiting 10000] [--finished 10000] [--scrapes 20]

The database holds `--waiting` unfinished runs (timers, approvals, queued and leased attempts, spread
over three definitions) and `--finished` finished ones; a scrape is one `generate_latest` of everything
`serve` shows (this process's series and the database's gauges: six GROUP BY queries in one read
transaction). Prints the median and 99th percentile, each query's plan (the partial indexes of live
rows should carry them), and the size of the answer.

PostgreSQL runs in a throwaway cluster (lockstep.testing.PgCluster); SQLite in a temporary file.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from prometheus_client import generate_latest

from lockstep.app.service import Service
from lockstep.store import open_store
from lockstep.testing import PgCluster, find_pg_bin

QUERIES = ("runs_by_status", "queue_stats", "timer_lag", "runs_at_step", "approvals_waiting", "lease_stats")
APPROVAL = {"approvers": {"users": ["alice"]}, "quorum": 1, "timeout": "30d"}
DEFINITIONS: list[dict[str, Any]] = [
    {"name": "nap", "steps": [{"id": "nap", "wait": "30d"}]},
    {"name": "ask", "steps": [{"id": "ask", "approval": APPROVAL}]},
    {"name": "call", "steps": [{"id": "call", "activity": "b.call", "timeout": "1h"}]},
    {"name": "done", "steps": [{"id": "fin", "succeed": True}]},
]


def _fill(svc: Service, waiting: int, finished: int) -> None:
    svc.principals.create_tenant("acme")
    svc.principals.create_user("acme", "alice", ["approver"], [])
    for d in DEFINITIONS:
        svc.publish("acme", d)
    shares = {"nap": waiting // 2, "ask": waiting * 2 // 5, "call": waiting - waiting // 2 - waiting * 2 // 5}
    for name, n in (*shares.items(), ("done", finished)):
        for at in range(0, n, 500):
            svc.start_many("acme", name, [{}] * min(500, n - at))
    svc.claim("bench", ["b.call"], limit=200, lease_ttl=timedelta(hours=1))  # some leases


def _plans(svc: Service, backend: str) -> list[str]:
    out = []
    with svc.read() as tx:
        c: Any = tx.c  # type: ignore[attr-defined]  # the adapter's connection, for EXPLAIN
        q: Any = tx.q  # type: ignore[attr-defined]
        params = {"now": 0, "soon": 0}
        for name in QUERIES:
            sql = q[name]
            if backend == "sqlite":
                rows = c.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
                plan = "; ".join(str(r[-1]) for r in rows)
            else:
                rows = c.execute("EXPLAIN " + sql, params).fetchall()
                plan = " / ".join(str(r[0]).strip() for r in rows[:4])
            out.append(f"  {name:18} {plan}")
    return out


def bench(label: str, url: str, backend: str, waiting: int, finished: int, scrapes: int) -> None:
    store = open_store(url)
    try:
        svc = Service(store)
        t = time.perf_counter()
        _fill(svc, waiting, finished)
        took = time.perf_counter() - t
        print(f"\n{label}: {waiting} waiting and {finished} finished runs written in {took:.0f} s")
        if backend == "postgresql":  # what autovacuum does after a load like this one
            with svc.write() as tx:
                tx.c.execute("ANALYZE")  # type: ignore[attr-defined]
        source = svc.metrics.exposition()
        size = len(generate_latest(source))  # warm: the first scrape also fills the label caches
        samples = []
        for _ in range(scrapes):
            t = time.perf_counter()
            generate_latest(source)
            samples.append(time.perf_counter() - t)
        s = sorted(samples)
        p99 = s[min(len(s) - 1, int(len(s) * 0.99))]
        print(f"  scrape: median {statistics.median(s) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, {size} bytes")
        print("\n".join(_plans(svc, backend)))
    finally:
        store.close()


@contextmanager
def _postgres() -> Iterator[str | None]:
    if find_pg_bin() is None:
        yield None
        return
    cluster = PgCluster().init().start()
    try:
        yield cluster.create_database("bench_scrape")
    finally:
        cluster.destroy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--waiting", type=int, default=10_000)
    ap.add_argument("--finished", type=int, default=10_000)
    ap.add_argument("--scrapes", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        bench("SQLite", f"sqlite:///{d}/bench.db", "sqlite", args.waiting, args.finished, args.scrapes)
    with _postgres() as url:
        if url is None:
            print("\nPostgreSQL: server binaries not found, skipped")
        else:
            bench("PostgreSQL", url, "postgresql", args.waiting, args.finished, args.scrapes)


if __name__ == "__main__":
    main()
