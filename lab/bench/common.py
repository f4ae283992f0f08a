"""What both engines' workloads share: the result shape, percentiles, the child-process protocol."""

from __future__ import annotations

import json
import math
import sqlite3
import statistics
from typing import Any

import psycopg

__all__ = ["MARKER", "durability", "emit", "percentile", "summarize_latencies"]

# A child prints exactly one line starting with MARKER followed by its JSON result; engines may log freely.
MARKER = "LOCKSTEP-BENCH-RESULT "


def emit(result: dict[str, Any]) -> None:
    print(MARKER + json.dumps(result), flush=True)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summarize_latencies(samples_s: list[float]) -> dict[str, Any]:
    ms = [s * 1000 for s in samples_s]
    return {
        "samples": len(ms),
        "p50_ms": percentile(ms, 50),
        "p99_ms": percentile(ms, 99),
        "mean_ms": statistics.fmean(ms),
        "max_ms": max(ms),
    }


def durability(url: str, sqlite_synchronous: str) -> dict[str, Any]:
    """The durability settings a measurement ran with, read from the database itself (SQLite's
    journal mode; PostgreSQL's fsync, synchronous_commit and WAL sync method); `sqlite_synchronous`
    says who set SQLite's synchronous level, which a connection cannot see on another's behalf."""
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        return {"journal_mode": mode, "synchronous": sqlite_synchronous}
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            b"SELECT name, setting FROM pg_settings WHERE name IN "
            b"('synchronous_commit', 'fsync', 'wal_sync_method')"
        ).fetchall()
    return {str(k): str(v) for k, v in rows}
