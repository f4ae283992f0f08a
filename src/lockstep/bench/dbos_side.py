"""The same workloads on DBOS Transact 3.x: a workflow of three @DBOS.step()s started with
DBOS.start_workflow, in this process, on the system database only (no application database).

DBOS is imported dynamically: it is the `bench` extra, never a runtime dependency, and mypy stays
clean without it installed.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sqlite3
import time
from collections.abc import Callable
from typing import Any

import psycopg

from .common import summarize_latencies

__all__ = ["dbos_version", "run_dbos"]

STEPS = 3


def dbos_version() -> str | None:
    try:
        return importlib.metadata.version("dbos")
    except importlib.metadata.PackageNotFoundError:
        return None


def _settings(url: str) -> dict[str, Any]:
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        # DBOS sets busy_timeout and foreign_keys only; synchronous stays SQLite's default (FULL).
        return {"journal_mode": mode, "synchronous": "FULL (SQLite default; DBOS does not change it)"}
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            b"SELECT name, setting FROM pg_settings WHERE name IN "
            b"('synchronous_commit', 'fsync', 'wal_sync_method')"
        ).fetchall()
    return {str(k): str(v) for k, v in rows}


def run_dbos(
    url: str,
    *,
    throughput_runs: int,
    latency_runs: int,
    warmup: int,
    timeout: float,
    log: Callable[[str], None] = lambda _m: None,
) -> dict[str, Any]:
    dbos_mod: Any = importlib.import_module("dbos")
    DBOS: Any = dbos_mod.DBOS

    DBOS(config={"name": "lockstep-bench", "system_database_url": url, "log_level": "WARNING"})

    def noop(n: int) -> int:
        return n

    step = DBOS.step(name="bench.noop")(noop)

    def three(n: int) -> int:
        return int(step(step(step(n))))

    workflow = DBOS.workflow(name="bench-three")(three)
    DBOS.launch()
    try:
        log("dbos latency")
        samples: list[float] = []
        for i in range(warmup + latency_runs):
            t0 = time.perf_counter()
            handle = DBOS.start_workflow(workflow, i)
            if handle.get_result() != i:
                raise RuntimeError("dbos latency: wrong result")
            if i >= warmup:
                samples.append(time.perf_counter() - t0)
        latency = summarize_latencies(samples)
        latency["observation"] = "client clock, DBOS.start_workflow() to handle.get_result() returning"

        log("dbos throughput")
        t0 = time.perf_counter()
        handles = [DBOS.start_workflow(workflow, i) for i in range(throughput_runs)]
        started = time.perf_counter()
        deadline = started + timeout
        for i, handle in enumerate(handles):
            if handle.get_result() != i:
                raise RuntimeError("dbos throughput: wrong result")
            if time.perf_counter() > deadline:
                raise TimeoutError(f"dbos throughput: not done after {timeout}s")
        elapsed = time.perf_counter() - t0
        throughput = {
            "runs": throughput_runs,
            "steps": throughput_runs * STEPS,
            "elapsed_s": elapsed,
            "start_phase_s": started - t0,
            "runs_per_s": throughput_runs / elapsed,
            "steps_per_s": throughput_runs * STEPS / elapsed,
        }
    finally:
        DBOS.destroy(destroy_registry=True)
    settings = {
        "worker": "in-process DBOS executor (DBOS.launch in the benchmark process), default thread pool",
        "start": "DBOS.start_workflow (no queue, no concurrency limit)",
        **_settings(url),
    }
    return {"throughput": throughput, "latency": latency, "settings": settings}
