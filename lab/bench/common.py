"""What both engines' workloads share: the result shape, percentiles, the child-process protocol."""

from __future__ import annotations

import json
import math
import os
import sqlite3
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

__all__ = [
    "MARKER",
    "Count",
    "CpuMeter",
    "durability",
    "emit",
    "long_runs",
    "percentile",
    "postmaster_pid",
    "proc_cpu_s",
    "rate",
    "sqlite_settings",
    "summarize_latencies",
    "wait_for",
]

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


def rate(
    runs: int, steps_per_run: int, elapsed: float, start_phase: float, cpu: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A throughput result: `runs` runs of `steps_per_run` steps in `elapsed` seconds (starts included),
    with the CPU per step (`CpuMeter.stop`) when measured."""
    return {
        **(cpu or {}),
        "runs": runs,
        "steps_per_run": steps_per_run,
        "steps": runs * steps_per_run,
        "elapsed_s": elapsed,
        "start_phase_s": start_phase,
        "runs_per_s": runs / elapsed,
        "steps_per_s": runs * steps_per_run / elapsed,
    }


def wait_for(done: Callable[[], int], target: int, timeout: float, what: str, interval: float = 0.01) -> None:
    """Poll `done()` until it reaches `target`; TimeoutError (saying how far it got) after `timeout` s."""
    deadline = time.perf_counter() + timeout
    while (n := done()) < target:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{what}: {n}/{target} after {timeout}s")
        time.sleep(interval)


def long_runs(runs: int, steps: int, short_steps: int = 3) -> int:
    """Runs of the long workload that make as many steps as `runs` runs of `short_steps` (at least 1)."""
    return max(1, runs * short_steps // steps)


def sqlite_settings(url: str) -> dict[str, Any]:
    """What a new connection to this SQLite file runs with unless its engine changes it: the file's
    journal mode (persistent) and the default synchronous level (per connection)."""
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        sync = int(conn.execute("PRAGMA synchronous").fetchone()[0])
    return {"journal_mode": mode, "synchronous_default": {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[sync]}


class Count:
    """One count query (`SELECT count(*) ...`) on its own read connection, kept open between polls."""

    def __init__(self, url: str, sql: str) -> None:
        self._sql = sql
        self._sqlite: sqlite3.Connection | None = None
        self._pg: psycopg.Connection[Any] | None = None
        if url.startswith("sqlite:///"):
            self._sqlite = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
            self._sqlite.execute("PRAGMA busy_timeout=30000")
        else:
            self._pg = psycopg.connect(url, autocommit=True)

    def __call__(self) -> int:
        if self._sqlite is not None:
            return int(self._sqlite.execute(self._sql).fetchone()[0])
        if self._pg is None:
            raise RuntimeError("the count's connection is closed")
        row = self._pg.execute(self._sql.encode()).fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        if self._sqlite is not None:
            self._sqlite.close()
        if self._pg is not None:
            self._pg.close()


def proc_cpu_s(pid: int, children: bool = False) -> float:
    """utime+stime of a process from /proc (with `children`: plus the reaped children's, which is where
    the CPU of PostgreSQL backends that exited is kept by their postmaster); 0.0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / os.sysconf("SC_CLK_TCK")


def _children(ppid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == ppid:
                    out.append(int(d.name))
            except (OSError, IndexError, ValueError):
                continue
    return out


def postmaster_pid(url: str) -> int | None:
    """The PostgreSQL server's pid (its data directory's postmaster.pid), None for SQLite or when the
    file is not readable from here."""
    if url.startswith("sqlite:///"):
        return None
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(b"SHOW data_directory").fetchone()
    try:
        return int((Path(str(row[0])) / "postmaster.pid").read_text().split()[0]) if row else None
    except (OSError, ValueError, IndexError):
        return None


class CpuMeter:
    """CPU seconds spent by the engine (this process, plus `pids()`: its worker processes) and by the
    database server (the postmaster, its live and its exited backends), between start() and stop()."""

    def __init__(self, url: str, pids: Callable[[], list[int]] = list) -> None:
        self._pids = pids
        self._pm = postmaster_pid(url)
        self._t0: tuple[float, float] = (0.0, 0.0)

    def _now(self) -> tuple[float, float]:
        t = os.times()
        engine = t.user + t.system + sum(proc_cpu_s(p) for p in self._pids())
        db = 0.0
        if self._pm is not None:
            db = proc_cpu_s(self._pm, children=True) + sum(proc_cpu_s(p) for p in _children(self._pm))
        return engine, db

    def start(self) -> None:
        self._t0 = self._now()

    def stop(self, steps: int) -> dict[str, Any]:
        engine, db = self._now()
        out: dict[str, Any] = {"engine_ms_per_step": 1000 * (engine - self._t0[0]) / steps}
        if self._pm is not None:
            out["db_ms_per_step"] = 1000 * (db - self._t0[1]) / steps
        return out
