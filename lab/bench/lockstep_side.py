"""The workloads on lockstep: an in-process Worker (with the scheduler) on one database."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg

from lockstep import Engine, Registry, activity
from lockstep.app.keys import LocalKeyProvider

from .common import CpuMeter, durability, long_runs, rate, summarize_latencies

__all__ = ["DEFINITION", "SEALED_DEFINITION", "definition", "record_workload", "run_lockstep"]

STEPS = 3


def definition(steps: int, name: str = "bench-three") -> dict[str, Any]:
    """A straight line of `steps` trivial activity steps."""
    return {
        "name": name,
        "steps": [
            {"id": f"s{i}", "activity": "bench.noop", "input": {"n": "${input.n}"}, "timeout": "30s"}
            for i in range(1, steps + 1)
        ],
    }


DEFINITION = definition(STEPS)
# The same process with a sensitive field: the card is in the run input, every activity's input and
# output, so each step seals two values and every command folds the sealed twin state (the cost of
# encryption, measured side by side with DEFINITION in the same process on the same database).
SEALED_DEFINITION: dict[str, Any] = {
    "name": "bench-three-sealed",
    "input_schema": {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "card": {"type": "string", "x-lockstep-sensitive": True}},
    },
    "steps": [
        {
            "id": f"s{i}",
            "activity": "bench.echo",
            "input": {"n": "${input.n}", "card": "${input.card}"},
            "output_sensitive": ["/card"],
            "timeout": "30s",
        }
        for i in range(1, STEPS + 1)
    ],
}
FAILED = ("failed", "cancelled", "needs_attention")


def _noop(payload: dict[str, Any]) -> dict[str, Any]:
    return {"n": payload.get("n")}


def _echo(payload: dict[str, Any]) -> dict[str, Any]:
    return {"n": payload.get("n"), "card": payload.get("card")}


class _Observer:
    """Reads run statuses on its own connection (read-only), so waiting does not go through the engine."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._sqlite: sqlite3.Connection | None = None
        self._pg: psycopg.Connection[Any] | None = None
        if url.startswith("sqlite:///"):
            self._sqlite = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
            self._sqlite.execute("PRAGMA busy_timeout=30000")
        else:
            self._pg = psycopg.connect(url, autocommit=True)

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self._sqlite is not None:
            return list(self._sqlite.execute(sql, params).fetchall())
        if self._pg is None:
            raise RuntimeError("observer is closed")
        return list(self._pg.execute(sql.replace("?", "%s").encode(), params).fetchall())

    def counts(self) -> dict[str, int]:
        return {str(s): int(n) for s, n in self._query("SELECT status, count(*) FROM runs GROUP BY status")}

    def status(self, run_id: str) -> str | None:
        rows = self._query("SELECT status FROM runs WHERE run_id = ?", (run_id,))
        return str(rows[0][0]) if rows else None

    def close(self) -> None:
        if self._sqlite is not None:
            self._sqlite.close()
        if self._pg is not None:
            self._pg.close()


def _throughput(
    engine: Engine,
    obs: _Observer,
    runs: int,
    timeout: float,
    sealed: bool = False,
    long: tuple[str, int] | None = None,
) -> dict[str, Any]:
    base = obs.counts().get("completed", 0)  # runs of earlier workloads on the same database
    meter = CpuMeter(obs.url)
    meter.start()
    t0 = time.perf_counter()
    for i in range(runs):
        if sealed:
            engine.start(SEALED_DEFINITION["name"], input={"n": i, "card": f"4111-0000-0000-{i:04d}"})
        elif long is not None:
            engine.start(long[0], input={"n": i})
        else:
            engine.start(DEFINITION["name"], input={"n": i})
    started = time.perf_counter()
    deadline = started + timeout
    while True:
        counts = obs.counts()
        done = counts.get("completed", 0) - base
        bad = sum(counts.get(s, 0) for s in FAILED)
        if bad:
            raise RuntimeError(f"lockstep throughput: runs ended badly: {counts}")
        if done >= runs:
            break
        if time.perf_counter() > deadline:
            raise TimeoutError(f"lockstep throughput: {done}/{runs} completed after {timeout}s")
        time.sleep(0.01)
    elapsed = time.perf_counter() - t0
    k = long[1] if long else STEPS
    return rate(runs, k, elapsed, started - t0, meter.stop(runs * k))


def _latency(engine: Engine, obs: _Observer, runs: int, warmup: int, timeout: float) -> dict[str, Any]:
    samples: list[float] = []
    for i in range(warmup + runs):
        t0 = time.perf_counter()
        run_id = engine.start(DEFINITION["name"], input={"n": i})
        while True:
            status = obs.status(run_id)
            if status == "completed":
                break
            if status in FAILED:
                raise RuntimeError(f"lockstep latency: run {run_id} ended {status}")
            if time.perf_counter() - t0 > timeout:
                raise TimeoutError(f"lockstep latency: run {run_id} still {status} after {timeout}s")
            time.sleep(0.001)
        if i >= warmup:
            samples.append(time.perf_counter() - t0)
    out = summarize_latencies(samples)
    out["observation"] = "client clock, start() to status=completed seen by a 1 ms poll on its own connection"
    return out


def run_lockstep(
    url: str,
    *,
    throughput_runs: int,
    latency_runs: int,
    warmup: int,
    concurrency: int,
    poll_ms: float,
    timeout: float,
    long_steps: int = 20,
    log: Callable[[str], None] = lambda _m: None,
) -> dict[str, Any]:
    long_def = definition(long_steps, "bench-long")
    registry = Registry()
    activity("bench.noop", registry=registry)(_noop)
    activity("bench.echo", registry=registry)(_echo)
    engine = Engine.open(url, keys=LocalKeyProvider(os.urandom(32)))
    obs = _Observer(url)
    worker = engine.worker(registry, concurrency=concurrency, poll_interval=timedelta(milliseconds=poll_ms))
    try:
        engine.publish(DEFINITION)
        engine.publish(SEALED_DEFINITION)
        engine.publish(long_def)
        worker.start()
        log("lockstep latency")
        latency = _latency(engine, obs, latency_runs, warmup, timeout)
        log("lockstep throughput")
        throughput = _throughput(engine, obs, throughput_runs, timeout)
        log(f"lockstep throughput, {long_steps} steps")
        long = (str(long_def["name"]), long_steps)
        throughput_long = _throughput(engine, obs, long_runs(throughput_runs, long_steps), timeout, long=long)
        # The cost of encryption: the plain and the sealed process in quarters, alternately (plain,
        # sealed, plain, sealed), in the same process on the same database, so the difference between
        # the two is the sealing.
        quarter = max(1, throughput_runs // 4)
        parts: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
        for sealed in (False, True, False, True):
            log(f"lockstep throughput, {'sealed' if sealed else 'plain'} quarter")
            parts[sealed].append(_throughput(engine, obs, quarter, timeout, sealed))
        throughput_plain, throughput_sealed = _combined(parts[False]), _combined(parts[True])
        settings = {
            "shape": "embedded",
            "worker": "in-process lockstep.Engine.worker (with scheduler), one process",
            "concurrency": concurrency,
            "poll_interval_ms": poll_ms,
            **durability(url, "FULL (Engine.open default)"),
        }
    finally:
        worker.stop(timeout=30)
        obs.close()
        engine.close()
    return {
        "throughput": throughput,
        "throughput_long": throughput_long,
        "throughput_plain": throughput_plain,
        "throughput_sealed": throughput_sealed,
        "latency": latency,
        "settings": settings,
    }


def record_workload(url: str, runs: int, mark: Callable[[], int]) -> tuple[int, int, float]:
    """The 3-step throughput workload embedded (16 slots) for the hardware limit's recording: (`mark()`
    when the measured phase begins, steps in it, lockstep's steps/s meanwhile, the recorder on)."""
    registry = Registry()
    activity("bench.noop", registry=registry)(_noop)
    engine = Engine.open(url)
    obs = _Observer(url)
    worker = engine.worker(registry, concurrency=16, poll_interval=timedelta(milliseconds=50))
    try:
        engine.publish(DEFINITION)
        worker.start()
        at = mark()
        sps = float(_throughput(engine, obs, runs, 600)["steps_per_s"])
    finally:
        worker.stop(timeout=30)
        obs.close()
        engine.close()
    return at, runs * STEPS, sps


def _combined(parts: list[dict[str, Any]]) -> dict[str, Any]:
    runs = sum(p["runs"] for p in parts)
    elapsed = sum(p["elapsed_s"] for p in parts)
    return {
        "runs": runs,
        "steps": runs * STEPS,
        "elapsed_s": elapsed,
        "start_phase_s": sum(p["start_phase_s"] for p in parts),
        "runs_per_s": runs / elapsed,
        "steps_per_s": runs * STEPS / elapsed,
    }
