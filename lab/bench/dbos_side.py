"""The same workloads on DBOS Transact 3.x: a workflow of three @DBOS.step()s started with
DBOS.start_workflow, in this process, on the system database only (no application database).

DBOS is imported dynamically: it is the `bench` extra, never a runtime dependency, and mypy stays
clean without it installed.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import time
from collections.abc import Callable
from typing import Any

from .common import durability, summarize_latencies

__all__ = ["dbos_version", "run_dbos"]

STEPS = 3


def dbos_version() -> str | None:
    try:
        return importlib.metadata.version("dbos")
    except importlib.metadata.PackageNotFoundError:
        return None


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
        **durability(url, "FULL (SQLite default; DBOS does not change it)"),
    }
    return {"throughput": throughput, "latency": latency, "settings": settings}
