"""Raw commit limits of the databases themselves, for reference: one single-row INSERT per commit."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

__all__ = ["pg_commits", "sqlite_commits"]


def sqlite_commits(path: Path, commits: int, synchronous: str = "FULL") -> dict[str, Any]:
    """WAL, the given synchronous level, one connection, autocommit INSERTs."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, payload TEXT NOT NULL)")
        t0 = time.perf_counter()
        for i in range(commits):
            conn.execute("INSERT INTO t (payload) VALUES (?)", (f"row-{i}",))
        elapsed = time.perf_counter() - t0
    finally:
        conn.close()
    return {
        "commits": commits,
        "elapsed_s": elapsed,
        "commits_per_s": commits / elapsed,
        "journal_mode": mode,
        "synchronous": synchronous,
    }


def pg_commits(url: str, commits: int, connections: int = 1) -> dict[str, Any]:
    """`connections` threads, each on its own autocommit connection, `commits` INSERTs in total."""
    conns = [psycopg.connect(url, autocommit=True) for _ in range(connections)]
    try:
        conns[0].execute(b"DROP TABLE IF EXISTS bench_raw")
        conns[0].execute(b"CREATE TABLE bench_raw (id bigserial PRIMARY KEY, payload text NOT NULL)")
        per = commits // connections
        errors: list[BaseException] = []

        def insert(conn: psycopg.Connection[Any]) -> None:
            try:
                for i in range(per):
                    conn.execute(b"INSERT INTO bench_raw (payload) VALUES (%s)", (f"row-{i}",))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=insert, args=(c,)) for c in conns]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        if errors:
            raise errors[0]
        sync = conns[0].execute(b"SHOW synchronous_commit").fetchone()
    finally:
        for c in conns:
            c.close()
    return {
        "commits": per * connections,
        "connections": connections,
        "elapsed_s": elapsed,
        "commits_per_s": per * connections / elapsed,
        "synchronous_commit": str(sync[0]) if sync else None,
    }
