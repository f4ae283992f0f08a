"""The same workloads on DBOS Transact 3.x: a workflow of trivial @DBOS.step()s, on the system database
only (no application database). Embedded: started with DBOS.start_workflow in the process that runs
them. Production shape (`worker_main` + `Client`): worker processes that DBOS.launch() and run a queue,
a client process that enqueues with DBOSClient under a workflow id (its start key).

On SQLite DBOS runs with the file's journal mode, which it never changes: `wal=True` sets the file to
WAL before DBOS opens it (the mode lockstep uses; a new connection's synchronous level stays FULL, the
same durability as lockstep's), `wal=False` leaves SQLite's default (DELETE).

DBOS is imported dynamically: it is the `bench` extra, never a runtime dependency, and mypy stays
clean without it installed.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

from .common import Count, CpuMeter, durability, long_runs, rate, sqlite_settings, summarize_latencies

__all__ = ["Client", "dbos_version", "prepare", "run_dbos", "settings", "worker_main"]

STEPS = 3
QUEUE = "bench"
WORKFLOW = "bench-steps"


def dbos_version() -> str | None:
    try:
        return importlib.metadata.version("dbos")
    except importlib.metadata.PackageNotFoundError:
        return None


def prepare(url: str, wal: bool) -> None:
    """On SQLite with `wal`: the file in WAL mode before DBOS first opens it (the mode is persistent)."""
    if wal and url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute("PRAGMA journal_mode=WAL")


def settings(url: str, shape: str) -> dict[str, Any]:
    if url.startswith("sqlite:///"):
        st = sqlite_settings(url)
        dur = {
            "journal_mode": st["journal_mode"],
            "synchronous": f"{st['synchronous_default']} (SQLite's default; DBOS does not set it)",
        }
    else:
        dur = durability(url, "")
    return {"shape": shape, **dur}


def _register(dbos: Any, url: str) -> Callable[..., Any]:
    DBOS: Any = dbos.DBOS
    DBOS(config={"name": "lockstep-bench", "system_database_url": url, "log_level": "WARNING"})

    def noop(n: int) -> int:
        return n

    step = DBOS.step(name="bench.noop")(noop)

    def steps(n: int, k: int) -> int:
        for _ in range(k):
            n = int(step(n))
        return n

    return DBOS.workflow(name=WORKFLOW)(steps)  # type: ignore[no-any-return]


def _throughput(DBOS: Any, url: str, workflow: Any, runs: int, k: int, timeout: float) -> dict[str, Any]:
    meter = CpuMeter(url)
    meter.start()
    t0 = time.perf_counter()
    handles = [DBOS.start_workflow(workflow, i, k) for i in range(runs)]
    started = time.perf_counter()
    deadline = started + timeout
    for i, handle in enumerate(handles):
        if handle.get_result() != i:
            raise RuntimeError("dbos throughput: wrong result")
        if time.perf_counter() > deadline:
            raise TimeoutError(f"dbos throughput: not done after {timeout}s")
    elapsed = time.perf_counter() - t0
    return rate(runs, k, elapsed, started - t0, meter.stop(runs * k))


def run_dbos(
    url: str,
    *,
    throughput_runs: int,
    latency_runs: int,
    warmup: int,
    timeout: float,
    long_steps: int = 20,
    wal: bool = False,
    log: Callable[[str], None] = lambda _m: None,
) -> dict[str, Any]:
    """Embedded: latency, then the 3-step and the `long_steps`-step throughput, in this process."""
    prepare(url, wal)
    dbos_mod: Any = importlib.import_module("dbos")
    DBOS: Any = dbos_mod.DBOS
    workflow = _register(dbos_mod, url)
    DBOS.launch()
    try:
        log("dbos latency")
        samples: list[float] = []
        for i in range(warmup + latency_runs):
            t0 = time.perf_counter()
            handle = DBOS.start_workflow(workflow, i, STEPS)
            if handle.get_result() != i:
                raise RuntimeError("dbos latency: wrong result")
            if i >= warmup:
                samples.append(time.perf_counter() - t0)
        latency = summarize_latencies(samples)
        latency["observation"] = "client clock, DBOS.start_workflow() to handle.get_result() returning"
        log("dbos throughput")
        throughput = _throughput(DBOS, url, workflow, throughput_runs, STEPS, timeout)
        log(f"dbos throughput, {long_steps} steps")
        throughput_long = _throughput(
            DBOS, url, workflow, long_runs(throughput_runs, long_steps), long_steps, timeout
        )
    finally:
        DBOS.destroy(destroy_registry=True)
    st = {
        **settings(url, "embedded"),
        "worker": "in-process DBOS executor (DBOS.launch in the benchmark process), default thread pool",
        "start": "DBOS.start_workflow (no queue, no concurrency limit)",
    }
    return {"throughput": throughput, "throughput_long": throughput_long, "latency": latency, "settings": st}


def worker_main(url: str, concurrency: int, ready: Callable[[], None]) -> None:
    """A DBOS worker process: runs the bench queue (`concurrency` workflows at once) until killed."""
    dbos_mod: Any = importlib.import_module("dbos")
    _register(dbos_mod, url)
    DBOS: Any = dbos_mod.DBOS
    DBOS.launch()  # then the queue: registering persists it, which needs the launched system database
    DBOS.register_queue(QUEUE, worker_concurrency=concurrency, polling_interval_sec=0.05)
    ready()
    threading.Event().wait()


class Client:
    """The client of the production shape: DBOSClient.enqueue under a workflow id (the start key)."""

    def __init__(self, url: str) -> None:
        dbos_mod: Any = importlib.import_module("dbos")
        self._client: Any = dbos_mod.DBOSClient(system_database_url=url, application_name="lockstep-bench")
        table = "workflow_status" if url.startswith("sqlite:///") else "dbos.workflow_status"
        self._done = Count(url, f"SELECT count(*) FROM {table} WHERE status = 'SUCCESS'")

    def start(self, key: str, n: int, steps: int) -> None:
        self._client.enqueue({"queue_name": QUEUE, "workflow_name": WORKFLOW, "workflow_id": key}, n, steps)

    def completed(self) -> int:
        return self._done()

    def close(self) -> None:
        self._done.close()
        self._client.destroy()
