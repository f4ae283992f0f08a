"""The same workloads on Absurd (`absurd-sdk` + `absurdctl`, PostgreSQL only): a task of trivial
`ctx.step`s (each a checkpoint written by absurd.set_task_checkpoint_state), spawned with
Absurd.spawn and run by Absurd.start_worker's thread pool. Embedded: the worker in a thread of the
process that spawns; production shape (`worker_main` + `Client`): worker processes, a client process
that spawns under an idempotency key (its start key).

The schema is installed with `absurdctl init` (the SQL bundled in the wheel) and the queue created with
Absurd.create_queue. Absurd is imported dynamically: it is benchmark-only, never a dependency.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import Count, CpuMeter, durability, long_runs, rate, summarize_latencies, wait_for

__all__ = ["Client", "absurd_missing", "absurd_version", "install", "run_absurd", "worker_main"]

STEPS = 3
QUEUE = "bench"
TASK = "bench-steps"
POLL_S = 0.05  # the same idle poll as lockstep's worker in the bench (Absurd's default is 0.25 s)


def absurd_version() -> str | None:
    try:
        return importlib.metadata.version("absurd-sdk")
    except importlib.metadata.PackageNotFoundError:
        return None


def absurd_missing() -> str | None:
    """Why Absurd cannot run here (None: it can)."""
    if absurd_version() is None:
        return "absurd-sdk is not installed (pip install absurd-sdk absurdctl)"
    if _absurdctl() is None:
        return "absurdctl is not installed (pip install absurdctl)"
    if shutil.which("psql") is None:
        return "absurdctl init needs psql on PATH"
    return None


def _absurdctl() -> str | None:
    beside = Path(sys.executable).with_name("absurdctl")
    return str(beside) if beside.exists() else shutil.which("absurdctl")


def install(url: str) -> None:
    """The schema (`absurdctl init -d URL`) and the bench queue, on a fresh database."""
    ctl = _absurdctl()
    if ctl is None:
        raise RuntimeError("absurdctl is not installed")
    proc = subprocess.run(  # noqa: S603 - a fixed command on our own throwaway database
        [ctl, "init", "-d", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"absurdctl init failed: {proc.stderr.strip() or proc.stdout.strip()}")
    app = _sdk().Absurd(url, queue_name=QUEUE)
    try:
        app.create_queue(QUEUE)
    finally:
        app.close()


def _sdk() -> Any:
    return importlib.import_module("absurd_sdk")


def _app(url: str) -> Any:
    app = _sdk().Absurd(url, queue_name=QUEUE)

    def steps(params: dict[str, Any], ctx: Any) -> int:
        n = int(params["n"])
        for i in range(int(params["steps"])):
            n = int(ctx.step(f"s{i}", lambda n=n: n))
        return n

    app.register_task(TASK)(steps)
    return app


def _completed(url: str) -> Count:
    return Count(url, f"SELECT count(*) FROM absurd.t_{QUEUE} WHERE state = 'completed'")


def _settings(url: str, shape: str, concurrency: int) -> dict[str, Any]:
    return {
        "shape": shape,
        "worker": "Absurd.start_worker (thread pool, one connection per Absurd client)",
        "concurrency": concurrency,
        "poll_interval_ms": POLL_S * 1000,
        "schema": f"absurdctl init (bundled SQL, absurd-sdk {absurd_version()})",
        **durability(url, ""),
    }


def run_absurd(
    url: str,
    *,
    throughput_runs: int,
    latency_runs: int,
    warmup: int,
    concurrency: int,
    timeout: float,
    long_steps: int = 20,
    log: Callable[[str], None] = lambda _m: None,
) -> dict[str, Any]:
    """Embedded: a worker thread and the spawning client in this process, each its own connection."""
    install(url)
    worker = _app(url)
    client = _sdk().Absurd(url, queue_name=QUEUE)
    done = _completed(url)
    thread = threading.Thread(
        target=worker.start_worker, kwargs={"concurrency": concurrency, "poll_interval": POLL_S}, daemon=True
    )
    thread.start()
    try:
        log("absurd latency")
        samples: list[float] = []
        for i in range(warmup + latency_runs):
            t0 = time.perf_counter()
            base = done()
            client.spawn(TASK, {"n": i, "steps": STEPS}, queue=QUEUE)
            wait_for(done, base + 1, timeout, "absurd latency", interval=0.001)
            if i >= warmup:
                samples.append(time.perf_counter() - t0)
        latency = summarize_latencies(samples)
        latency["observation"] = "client clock, spawn() to state=completed seen by a 1 ms poll"

        def throughput(runs: int, k: int) -> dict[str, Any]:
            base = done()
            meter = CpuMeter(url)
            meter.start()
            t0 = time.perf_counter()
            for i in range(runs):
                client.spawn(TASK, {"n": i, "steps": k}, queue=QUEUE)
            started = time.perf_counter()
            wait_for(done, base + runs, timeout, "absurd throughput")
            elapsed = time.perf_counter() - t0
            return rate(runs, k, elapsed, started - t0, meter.stop(runs * k))

        log("absurd throughput")
        short = throughput(throughput_runs, STEPS)
        log(f"absurd throughput, {long_steps} steps")
        long = throughput(long_runs(throughput_runs, long_steps), long_steps)
    finally:
        worker.stop_worker()
        thread.join(timeout=30)
        worker.close()
        client.close()
        done.close()
    return {
        "throughput": short,
        "throughput_long": long,
        "latency": latency,
        "settings": {**_settings(url, "embedded", concurrency), "start": "Absurd.spawn, one per run"},
    }


def worker_main(url: str, concurrency: int, ready: Callable[[], None]) -> None:
    """An Absurd worker process: start_worker until killed."""
    app = _app(url)
    ready()
    app.start_worker(concurrency=concurrency, poll_interval=POLL_S)


class Client:
    """The client of the production shape: Absurd.spawn under an idempotency key (the start key)."""

    def __init__(self, url: str) -> None:
        self._app = _sdk().Absurd(url, queue_name=QUEUE)
        self._done = _completed(url)

    def start(self, key: str, n: int, steps: int) -> None:
        self._app.spawn(TASK, {"n": n, "steps": steps}, queue=QUEUE, idempotency_key=key)

    def completed(self) -> int:
        return self._done()

    def close(self) -> None:
        self._done.close()
        self._app.close()
