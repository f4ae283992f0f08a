"""The hardware limit of a backend for lockstep's own writes: the rate at which the database alone
accepts exactly what lockstep writes per step, in lockstep's own transactions and batches.

`python -m lab.bench.hardware --trace-url URL --replay-url URL [--replay-url URL ...] --runs N` runs
the 3-step throughput workload embedded once with a recorder on every transaction's connection: each
transaction's writes (INSERT, UPDATE, DELETE, NOTIFY and savepoints, as sent: the same statement
text, parameters and executemany batches; reads, locking reads included, are left out). It then
replays the recording on fresh databases migrated by lockstep, one transaction after another as
recorded (one pipeline per transaction on PostgreSQL, BEGIN IMMEDIATE on SQLite): with one
connection, and on PostgreSQL with one connection per `--replay-url` at once, each its own database
(all cores; the writes of different runs never contend in lockstep either). No engine code runs in
the replay, so steps/s of the replay is the ceiling for lockstep's steps/s on this machine.
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from .common import emit

__all__ = ["Recorder", "is_write", "main", "replay"]

WRITES = ("INSERT", "UPDATE", "DELETE", "NOTIFY", "SAVEPOINT", "RELEASE")
Statement = tuple[str, Any, bool]  # (sql, params or list of params, executemany)


def is_write(sql: str | bytes) -> bool:
    """Whether a statement writes (what the replay sends); a CTE counts when it modifies."""
    text = (sql.decode() if isinstance(sql, bytes) else sql).lstrip().upper()
    if text.startswith("WITH"):
        return re.search(r"\b(INSERT|UPDATE|DELETE)\b", text) is not None
    return text.startswith(WRITES)


class _Cursor:
    def __init__(self, cur: Any, log: list[Statement]) -> None:
        self._cur, self._log = cur, log

    def execute(self, sql: Any, params: Any = None, *args: Any, **kwargs: Any) -> Any:
        if is_write(sql):
            self._log.append((sql, params, False))
        self._cur.execute(sql, params, *args, **kwargs) if params is not None else self._cur.execute(sql)
        return self

    def executemany(self, sql: Any, rows: Any, *args: Any, **kwargs: Any) -> Any:
        rows = list(rows)
        if is_write(sql):
            self._log.append((sql, rows, True))
        self._cur.executemany(sql, rows, *args, **kwargs)
        return self

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._cur)


class _Conn:
    """A transaction's connection that logs the writes sent through it (directly or by its cursors)."""

    def __init__(self, conn: Any, log: list[Statement]) -> None:
        self._conn, self._log = conn, log

    def execute(self, sql: Any, params: Any = None, *args: Any, **kwargs: Any) -> Any:
        cur = self.cursor()
        return cur.execute(sql, params, *args, **kwargs)

    def cursor(self, *args: Any, **kwargs: Any) -> _Cursor:
        return _Cursor(self._conn.cursor(*args, **kwargs), self._log)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class Recorder:
    """Installs itself on lockstep's transaction base class; `transactions` are the recorded writes of
    each transaction that wrote anything, in the order they began."""

    def __init__(self) -> None:
        self.transactions: list[list[Statement]] = []
        self._lock = threading.Lock()

    @contextmanager
    def installed(self) -> Iterator[Recorder]:
        from lockstep.store.sqltx import base  # noqa: PLC0415 - the lab reaches into the store on purpose

        original = base.SqlBase.__init__
        recorder = self

        def init(tx: Any, conn: Any, *args: Any, **kwargs: Any) -> None:
            log: list[Statement] = []
            with recorder._lock:
                recorder.transactions.append(log)
            original(tx, _Conn(conn, log), *args, **kwargs)

        base.SqlBase.__init__ = init  # type: ignore[method-assign,assignment]
        try:
            yield self
        finally:
            base.SqlBase.__init__ = original  # type: ignore[method-assign]

    def written(self, since: int = 0) -> list[list[Statement]]:
        return [t for t in self.transactions[since:] if t]


def _sqlite_replay(path: str, txs: list[list[Statement]]) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=FULL")  # lockstep's (Engine.open default); WAL is the file's
    t0 = time.perf_counter()
    for tx in txs:
        conn.execute("BEGIN IMMEDIATE")
        for sql, params, many in tx:
            if many:
                conn.executemany(sql, params)
            else:
                conn.execute(sql, params if params is not None else ())
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - t0
    conn.close()
    return elapsed


def _pg_replay(url: str, txs: list[list[Statement]]) -> float:
    with psycopg.connect(url) as conn:
        t0 = time.perf_counter()
        for tx in txs:
            with conn.transaction(), conn.pipeline():
                cur = conn.cursor()
                for sql, params, many in tx:
                    if many:
                        cur.executemany(sql, params)
                    else:
                        cur.execute(sql, params)
        return time.perf_counter() - t0


def replay(urls: list[str], txs: list[list[Statement]]) -> float:
    """Replay `txs` on every database of `urls` at once (one connection each); the slowest one's s."""
    times: list[float] = []
    errors: list[BaseException] = []

    def one(url: str) -> None:
        try:
            if url.startswith("sqlite:///"):
                times.append(_sqlite_replay(url.removeprefix("sqlite:///"), txs))
            else:
                times.append(_pg_replay(url, txs))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(u,)) for u in urls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return max(times)


def _record(url: str, runs: int) -> tuple[list[list[Statement]], list[list[Statement]], int, float]:
    """(setup transactions, the throughput phase's transactions, its steps, lockstep's steps/s)."""
    from .lockstep_side import record_workload  # noqa: PLC0415 - imports lockstep with the recorder on

    rec = Recorder()
    with rec.installed():
        mark, steps, sps = record_workload(url, runs, lambda: len(rec.transactions))
    return rec.written(0)[: len(rec.written(0)) - len(rec.written(mark))], rec.written(mark), steps, sps


def _fresh(url: str) -> None:
    from lockstep.store import open_store  # noqa: PLC0415

    open_store(url).close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.bench.hardware")
    p.add_argument("--trace-url", required=True)
    p.add_argument(
        "--replay-url",
        action="append",
        required=True,
        help="fresh databases: the first for one connection, the others replayed at once",
    )
    p.add_argument("--runs", type=int, default=2000)
    a = p.parse_args(argv)
    setup, phase, steps, recorded_sps = _record(a.trace_url, a.runs)
    statements = sum(len(t) for t in phase)
    rows = sum(len(params) if many else 1 for t in phase for _sql, params, many in t)
    for u in a.replay_url:
        _fresh(u)
        replay([u], setup)
    one = replay(a.replay_url[:1], phase)
    out: dict[str, Any] = {
        "steps": steps,
        "transactions": len(phase),
        "statements_per_step": statements / steps,
        "rows_per_step": rows / steps,
        "one_connection_steps_per_s": steps / one,
        # lockstep itself moments before, on the same machine (recorder on: a little slower)
        "lockstep_recording_steps_per_s": recorded_sps,
        "nproc": len(os.sched_getaffinity(0)),
    }
    if len(a.replay_url) > 1:  # the others at once, each replaying the whole phase on its own database
        many = a.replay_url[1:]
        out["connections"] = len(many)
        out["all_connections_steps_per_s"] = len(many) * steps / replay(many, phase)
    emit(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
