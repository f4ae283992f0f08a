"""The report's measured reason for each throughput target: what the machine's cores allow at the CPU
a step costs now, and what a step could cost at most to reach the target.

A target of steps/s is a budget of CPU per step: with N cores busy, at most N x 1000 / rate ms of CPU
(engine processes and database together) per step. Set beside what a step costs in this run, it says
whether a target is a matter of tuning (the cost fits the budget, the time goes elsewhere: waits,
locks, one writer) or of doing less work per step (the cost is over the budget on every layout), and
on PostgreSQL whether the database's own share alone is already over it.
"""

from __future__ import annotations

from typing import Any

from .report_engines import LABELS, SHAPES, hardware_limit, throughput_targets
from .report_engines import fmt as _f

__all__ = ["cpu_budget_section"]


def _needs(backend: str, med: dict[str, Any], suffix: str) -> list[tuple[str, float]]:
    """(target, steps/s it needs) for the throughput targets of one shape that this run measured."""
    out: list[tuple[str, float]] = []
    for peer, times in throughput_targets(backend):
        rate = med.get(f"{peer}{suffix}", {}).get("throughput.steps_per_s")
        if rate:
            out.append((f"{times}x {LABELS[peer]}", times * rate))
    if limit := hardware_limit(med.get("hardware") or {}):
        out.append(("50% of the hardware limit", 0.5 * limit))
    return out


def _verdict(backend: str, cost: float, db: float, budget: float) -> str:
    if cost <= budget:
        waits = "SQLite's one writer at a time" if backend == "sqlite" else "locks and round trips"
        return f"the cost fits the budget: the time goes to waiting ({waits}), not CPU"
    if db > budget:
        return f"out of reach on this machine: the database's own {db:.2f} ms is over the budget"
    return f"a step must cost at least {cost / budget:.1f}x less CPU"


def cpu_budget_section(medians: dict[str, Any], nproc: int) -> list[str]:
    """The table of budgets per backend, shape and target ([] when no CPU cost was measured)."""
    rows: list[str] = []
    for backend, med in medians.items():
        for suffix, shape in SHAPES:
            lk = med.get(f"lockstep{suffix}", {})
            engine = lk.get("throughput.engine_ms_per_step")
            if engine is None:
                continue
            db = lk.get("throughput.db_ms_per_step") or 0.0
            cost = engine + db
            ceiling = nproc * 1000.0 / cost
            for target, needed in _needs(backend, med, suffix):
                budget = nproc * 1000.0 / needed
                rows.append(
                    f"| {backend}, {shape} | {target} | {_f(needed, 0)} | {_f(budget, 3)} | "
                    f"{_f(engine, 3)} + {_f(db, 3)} | {_f(ceiling, 0)} | "
                    f"{_f(lk.get('throughput.steps_per_s'), 0)} | {_verdict(backend, cost, db, budget)} |"
                )
    if not rows:
        return []
    return [
        "\n## What the CPU allows\n",
        f"A target of steps/s is a budget of CPU per step: {nproc} cores busy give at most {nproc} x 1000 / "
        "rate ms of CPU per step (engine processes and database together; on SQLite the database runs "
        "inside the engine). Beside it, what a 3-step run's step costs in this run (medians above) and "
        f"the rate {nproc} fully busy cores would allow at that cost (an upper bound: one Python process "
        "uses about one core, so the embedded shape gets less):\n",
        "| lockstep | target | steps/s needed | CPU budget per step, ms | CPU per step now, ms "
        f"(engine + database) | ceiling on {nproc} cores at that cost, steps/s | measured, steps/s | "
        "what it takes |",
        "|---|---|---:|---:|---:|---:|---:|---|",
        *rows,
    ]
