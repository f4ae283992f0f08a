"""The production shape, for every engine: worker processes running the engine's worker, and a client
(this process) starting runs one at a time under a start key, as an application server would; the
clock runs from the first start until the last run completed (counted in the database).

lockstep's workers are `lockstep worker` processes (the first also schedules); DBOS's are processes
that DBOS.launch() a queue (DBOSClient.enqueue with a workflow id); Absurd's run Absurd.start_worker
(Absurd.spawn with an idempotency key).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from .. import lab_env
from .common import CpuMeter, durability, long_runs, rate, wait_for
from .peer_worker import READY

__all__ = ["drive", "run_split"]

STEPS = 3


class Client(Protocol):
    def start(self, key: str, n: int, steps: int) -> None: ...
    def completed(self) -> int: ...
    def close(self) -> None: ...


def drive(
    client: Client,
    url: str,
    prefix: str,
    runs: int,
    steps: int,
    timeout: float,
    pids: Callable[[], list[int]] = list,
) -> dict[str, Any]:
    """Start `runs` runs of `steps` steps under keys `prefix`0.. and time them until all completed; CPU
    per step of the client and the worker processes (the engine) and of the database server."""
    base = client.completed()
    meter = CpuMeter(url, pids)
    meter.start()
    t0 = time.perf_counter()
    for i in range(runs):
        client.start(f"{prefix}{i}", i, steps)
    started = time.perf_counter()
    wait_for(client.completed, base + runs, timeout, f"{runs} runs of {steps} steps")
    elapsed = time.perf_counter() - t0
    return rate(runs, steps, elapsed, started - t0, meter.stop(runs * steps))


def _peer(engine: str, url: str, concurrency: int, timeout: float) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "lab.bench.peer_worker", "--engine", engine, "--url", url]
    proc = subprocess.Popen(  # noqa: S603 - our own module, fixed arguments
        [*cmd, "--concurrency", str(concurrency)], stdout=subprocess.PIPE, text=True, env=lab_env(os.environ)
    )
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None  # noqa: S101 - Popen with stdout=PIPE
    for line in proc.stdout:
        if line.strip() == READY:
            return proc
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError(f"{engine} worker process exited {proc.wait()} before it was ready")


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


class _Lockstep:
    def __init__(self, url: str, workers: int, concurrency: int, long_steps: int) -> None:
        from .fleet_side import Lab  # noqa: PLC0415 - the lab's process machinery, lockstep only
        from .lockstep_side import definition  # noqa: PLC0415

        self._workdir = Path(tempfile.mkdtemp(prefix="lockstep-bench-split-"))
        self.lab = Lab(url, self._workdir)
        for steps, name in ((STEPS, "bench-three"), (long_steps, "bench-long")):
            self.lab.engine.publish(definition(steps, name))
        self._names = {STEPS: "bench-three", long_steps: "bench-long"}
        self._procs = [
            self.lab.worker(f"w{i + 1}", concurrency=concurrency, scheduler=i == 0) for i in range(workers)
        ]

    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def start(self, key: str, n: int, steps: int) -> None:
        self.lab.engine.start(self._names[steps], input={"n": n}, key=key)

    def completed(self) -> int:
        return self.lab.completed()

    def close(self) -> None:
        try:
            self.lab.close()
        finally:
            shutil.rmtree(self._workdir, ignore_errors=True)


def run_split(
    engine: str,
    url: str,
    *,
    throughput_runs: int,
    workers: int,
    concurrency: int,
    timeout: float,
    long_steps: int = 20,
    log: Callable[[str], None] = lambda _m: None,
) -> dict[str, Any]:
    procs: list[subprocess.Popen[str]] = []
    client: Client
    if engine == "lockstep":
        client = ls = _Lockstep(url, workers, concurrency, long_steps)
        pids = ls.pids
        worker = f"`lockstep worker --concurrency {concurrency}` x{workers} (the first schedules)"
        start = "Engine.start(key=...) per run from the client process"
    else:
        if engine.startswith("dbos"):
            from . import dbos_side  # noqa: PLC0415 - each child imports one engine

            dbos_side.prepare(url, engine == "dbos_wal")
            worker = f"DBOS.launch() worker processes x{workers}, queue worker_concurrency={concurrency}"
            start = "DBOSClient.enqueue(workflow_id=key) per run from the client process"
            make: Callable[[str], Client] = dbos_side.Client
        else:
            from . import absurd_side  # noqa: PLC0415 - each child imports one engine

            absurd_side.install(url)
            worker = f"Absurd.start_worker(concurrency={concurrency}) processes x{workers}"
            start = "Absurd.spawn(idempotency_key=key) per run from the client process"
            make = absurd_side.Client
        procs = [_peer(engine.removesuffix("_wal"), url, concurrency, 120) for _ in range(workers)]
        client = make(url)

        def pids() -> list[int]:
            return [p.pid for p in procs]

    try:
        log(f"{engine} production shape, 3 steps")
        short = drive(client, url, "k3-", throughput_runs, STEPS, timeout, pids)
        log(f"{engine} production shape, {long_steps} steps")
        long = drive(
            client, url, f"k{long_steps}-", long_runs(throughput_runs, long_steps), long_steps, timeout, pids
        )
    finally:
        client.close()
        _stop(procs)
    settings: dict[str, Any] = {"shape": "split", "workers": worker, "start": start}
    if engine.startswith("dbos"):
        from .dbos_side import settings as dbos_settings  # noqa: PLC0415

        settings.update(dbos_settings(url, "split"))
    else:
        settings.update(durability(url, "FULL (Engine.open default)" if engine == "lockstep" else ""))
    return {"throughput": short, "throughput_long": long, "settings": settings}
