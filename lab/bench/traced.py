"""The cost of tracing: the two-worker throughput workload with tracing off and on, side by side in one
run, on one database. On, every worker process exports its spans (run, three steps, three attempts per
run) with the standard batch span processor to a real OTLP/HTTP receiver on loopback in this process.
The phases go off, on, on, off, so a database that grows during the workload weighs on both alike."""

from __future__ import annotations

import signal
import time
from functools import partial
from pathlib import Path
from typing import Any

from ..fleet import wait_until
from ..fleet.otlp import otlp_receiver
from .fleet_side import Lab, lab

__all__ = ["tracing"]

PHASES = ("off", "on", "on", "off")
THREE_NOOPS = {
    "name": "bench-traced",
    "steps": [
        {"id": f"s{i}", "activity": "bench.noop", "input": {"n": "${input.n}"}, "timeout": "60s"}
        for i in (1, 2, 3)
    ],
}


def _reached(lb: Lab, n: int) -> bool:
    return lb.completed() >= n


def tracing(url: str, workdir: Path, runs: int, timeout: float) -> dict[str, Any]:
    """Steps per second of two worker processes, tracing off and on; the spans the receiver got."""
    rates: dict[str, list[float]] = {"off": [], "on": []}
    with otlp_receiver() as receiver, lab(url, workdir) as lb:
        lb.engine.publish(THREE_NOOPS)
        done = 0
        for k, mode in enumerate(PHASES):
            for name in list(lb.env):
                if name.startswith("OTEL_"):
                    del lb.env[name]
            if mode == "on":
                lb.env.update({**receiver.env(service="lockstep-bench"), "OTEL_BSP_SCHEDULE_DELAY": "1000"})
            workers = [lb.worker(f"p{k}a"), lb.worker(f"p{k}b", scheduler=False)]
            t0 = time.perf_counter()
            for chunk in range(0, runs, 100):
                inputs = [{"n": i} for i in range(chunk, chunk + 100)]
                lb.engine.service.start_many("default", "bench-traced", inputs)
            done += runs
            wait_until(partial(_reached, lb, done), timeout, f"{done} runs to complete", interval=0.01)
            rates[mode].append(3 * runs / (time.perf_counter() - t0))
            for w in workers:  # SIGTERM: a traced worker exports what its batch still holds
                w.signal(signal.SIGTERM)
            for w in workers:
                w.wait(60)
        spans = len(receiver.received())
    off, on = sum(rates["off"]) / 2, sum(rates["on"]) / 2
    return {
        "runs_per_phase": runs,
        "steps_per_s_off": off,
        "steps_per_s_on": on,
        "on_over_off": on / off if off else None,
        "spans_received": spans,
        "spans_expected": 2 * runs * 7,  # per traced run: the root, 3 steps, 3 attempts
    }
