"""Parallel and for-each steps against the straight line: the two-worker throughput workload on three
definitions that each run three activity steps per run, side by side on one database: one after the
other, as three branches of a parallel step, and as a for-each over three items (three at a time).
The phases go straight, parallel, for-each, then again in reverse, so a growing database weighs on all
alike; steps/s counts activity steps completed."""

from __future__ import annotations

import signal
import time
from functools import partial
from pathlib import Path
from typing import Any

from ..fleet import wait_until
from .fleet_side import Lab, lab

__all__ = ["shapes"]


def _noop(sid: str, n: str = "${input.n}") -> dict[str, Any]:
    return {"id": sid, "activity": "bench.noop", "input": {"n": n}, "timeout": "60s"}


DEFINITIONS: dict[str, dict[str, Any]] = {
    "straight": {"name": "bench-straight", "steps": [_noop(f"s{i}") for i in (1, 2, 3)]},
    "parallel": {
        "name": "bench-parallel",
        "steps": [{"id": "fan", "parallel": {"branches": {f"b{i}": [_noop(f"s{i}")] for i in (1, 2, 3)}}}],
    },
    "for_each": {
        "name": "bench-for-each",
        "steps": [
            {
                "id": "lines",
                "for_each": {"items": "${input.items}", "concurrency": 3, "body": [_noop("line", "${item}")]},
            }
        ],
    },
}
PHASES = ("straight", "parallel", "for_each", "for_each", "parallel", "straight")


def _reached(lb: Lab, n: int) -> bool:
    return lb.completed() >= n


def shapes(url: str, workdir: Path, runs: int, timeout: float) -> dict[str, Any]:
    """Steps per second of two worker processes on each of the three shapes."""
    rates: dict[str, list[float]] = {k: [] for k in DEFINITIONS}
    with lab(url, workdir) as lb:
        for d in DEFINITIONS.values():
            lb.engine.publish(d)
        done = 0
        for k, shape in enumerate(PHASES):
            workers = [lb.worker(f"p{k}a"), lb.worker(f"p{k}b", scheduler=False)]
            name = DEFINITIONS[shape]["name"]
            t0 = time.perf_counter()
            for chunk in range(0, runs, 100):
                inputs = [{"n": i, "items": [i, i + 1, i + 2]} for i in range(chunk, chunk + 100)]
                lb.engine.service.start_many("default", name, inputs)
            done += runs
            wait_until(partial(_reached, lb, done), timeout, f"{done} runs to complete", interval=0.01)
            rates[shape].append(3 * runs / (time.perf_counter() - t0))
            for w in workers:
                w.signal(signal.SIGTERM)
            for w in workers:
                w.wait(60)
        events = dict(lb.sql("SELECT type, count(*) FROM events GROUP BY type"))
    per = {k: sum(v) / len(v) for k, v in rates.items()}
    return {
        "runs_per_phase": runs,
        "steps_per_s_straight": per["straight"],
        "steps_per_s_parallel": per["parallel"],
        "steps_per_s_for_each": per["for_each"],
        "parallel_over_straight": per["parallel"] / per["straight"] if per["straight"] else None,
        "for_each_over_straight": per["for_each"] / per["straight"] if per["straight"] else None,
        "joins": int(events.get("StepJoined", 0)),
        "joins_expected": 4 * runs,
    }
