"""What the audit log's hash chain costs a write, and a login, on both backends (issue 16).

    .venv/bin/python -m lab.bench.audit [--rows 400] [--writers 8]

- append: one audit row in its own write transaction, chained (lock the chain's head, hash, insert,
  advance the head) against the plain INSERT that lockstep did before the chain; one writer;
- contended: `--writers` threads (each its own connection) appending to ONE tenant's chain at once,
  the worst case (every writer waits for the same head row); latency per row and rows per second;
- login: a whole password login as the UI does it (throttle counters, scrypt, the audit row, the
  session), one at a time, and `--writers` logins of one tenant at once with a plain audit INSERT and
  with the chained row: scrypt (CPU) sets the pace, the chain's lock does not.

PostgreSQL runs in a throwaway cluster (lockstep.testing.PgCluster); SQLite in a temporary file.
Times in milliseconds (median and 99th percentile).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from lockstep.app.audit import Audit
from lockstep.app.service import Service
from lockstep.core.canonical import canonical_json
from lockstep.core.timeutil import iso
from lockstep.store import Store, open_store
from lockstep.testing import PgCluster, find_pg_bin

PASSWORD = "correct horse battery staple 42"  # noqa: S105 - a benchmark user's


def _ms(samples: list[float]) -> str:
    s = sorted(samples)
    p99 = s[min(len(s) - 1, int(len(s) * 0.99))]
    return f"median {statistics.median(s) * 1000:6.2f} ms  p99 {p99 * 1000:6.2f} ms"


def _timed(fn: Callable[[int], None], n: int) -> list[float]:
    out = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t)
    return out


def _contended(fn: Callable[[int], None], n: int, writers: int) -> tuple[list[float], float]:
    """`writers` threads released together, `n` calls each; (latencies, calls per second)."""
    barrier = threading.Barrier(writers + 1)
    samples: list[float] = []
    lock = threading.Lock()

    def run(w: int) -> None:
        barrier.wait()
        mine = _timed(lambda i: fn(w * n + i), n)
        with lock:
            samples.extend(mine)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return samples, writers * n / (time.perf_counter() - t0)


def _plain_insert(store: Store, i: int) -> None:
    """The audit write as it was before the chain: one INSERT (raw SQL, no chain columns)."""
    mark = "?" if store.url.startswith("sqlite") else "%s"
    values = ", ".join([mark] * 7)
    sql = f"INSERT INTO audit (at, tenant, actor, action, target, outcome, detail) VALUES ({values})"
    row = (iso(datetime.now(UTC)), "bench-plain", "u", "ui.login", None, "ok", canonical_json({"n": i}))
    with store.write() as tx:
        tx.c.execute(sql, row)  # type: ignore[attr-defined]


def bench(name: str, url: str, rows: int, writers: int) -> None:
    store = open_store(url)
    svc = Service(store)
    svc.principals.create_tenant("bench")
    for w in range(writers):
        svc.principals.create_user("bench", f"u{w}", ["viewer"], [])
        svc.principals.set_password("bench", f"u{w}", PASSWORD)
    log = Audit(svc.kernel)

    def chained(i: int) -> None:
        log.record("bench", "u", "ui.login", None, "ok", n=i)

    def login(i: int, chain: bool = True) -> None:
        user, address = f"u{i % writers}", f"10.0.{i % 250}.1"
        p = svc.principals.authenticate_password("bench", user, PASSWORD, address=address)
        if p is None:
            raise SystemExit(f"the login of {user} was refused")
        if chain:
            svc.principals.audit(p.tenant, p.name, "ui.login", None, "ok")
        else:
            _plain_insert(store, i)
        svc.principals.open_session(p)

    print(f"\n{name}")
    print(f"  append, plain INSERT (before):  {_ms(_timed(lambda i: _plain_insert(store, i), rows))}")
    print(f"  append, chained:                {_ms(_timed(chained, rows))}")
    samples, rate = _contended(lambda i: _plain_insert(store, i), rows // writers or 1, writers)
    print(f"  append, {writers} writers, plain:     {_ms(samples)}  ({rate:,.0f} rows/s)")
    samples, rate = _contended(chained, rows // writers or 1, writers)
    print(f"  append, {writers} writers, one chain: {_ms(samples)}  ({rate:,.0f} rows/s)")
    logins = max(8, rows // 20)
    print(f"  login, one at a time:           {_ms(_timed(login, logins))}")
    samples, rate = _contended(lambda i: login(i, chain=False), max(2, logins // writers), writers)
    print(f"  login, {writers} at once, plain row:  {_ms(samples)}  ({rate:,.1f} logins/s)")
    samples, rate = _contended(login, max(2, logins // writers), writers)
    print(f"  login, {writers} at once, one tenant: {_ms(samples)}  ({rate:,.1f} logins/s)")
    if not log.verify("bench").ok:
        raise SystemExit("the benchmark's audit chain does not verify")
    store.close()


@contextmanager
def _postgres() -> Iterator[str | None]:
    if find_pg_bin() is None:
        yield None
        return
    cluster = PgCluster().init().start()
    try:
        yield cluster.create_database("bench_audit")
    finally:
        cluster.destroy()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=400)
    ap.add_argument("--writers", type=int, default=8)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        bench("SQLite (synchronous=FULL)", f"sqlite:///{d}/bench.db", args.rows, args.writers)
    with _postgres() as url:
        if url is None:
            print("\nPostgreSQL: server binaries not found, skipped")
        else:
            bench("PostgreSQL", url, args.rows, args.writers)


if __name__ == "__main__":
    main()
