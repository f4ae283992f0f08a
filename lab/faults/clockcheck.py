"""The clock checks (scenarios_clocks.py): no lease taken from a live worker, no timer early.

Both are measured outside the engine's clocks: leases by the attempts that ended ActivityTimedOut while
no worker was stopped or killed; timers by the downstream's own wall clock (an unfaked process), from the
charge it applied to the ship it applied after the run's timer fired.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .checker import Verdict

__all__ = ["CLOCK_CHECKS", "EARLY_BOUND_S", "check_clocks"]

CLOCK_CHECKS = ("leases_stolen", "timers_early")
# docs/design.md, "Whose clock decides what": a process measures the database's clock again at most a
# second after its own clock stepped, so a timer fires at most this much before its time.
EARLY_BOUND_S = 1.0


def check_clocks(
    v: Verdict, effects: list[dict[str, Any]], timed_out: list[str], wait_s: float, *, strict: bool = True
) -> dict[str, float]:
    """`strict` (each process has a clock of its own, the database's decides): flag every attempt that
    timed out (no worker was stopped, so each is a live worker's lease taken) and every run whose ship
    came before its charge plus `wait_s` less the bound. Returns the earliest and latest charge-to-ship
    gaps seen, for the report."""
    if strict:
        for what in timed_out:
            v.flag("leases_stolen", what)
    charged: dict[str, float] = {}
    gaps: list[float] = []
    for e in effects:
        if e["kind"] == "charge":
            charged.setdefault(e["run_id"], e["at"])
        elif e["kind"] == "ship" and e["run_id"] in charged:
            gap = e["at"] - charged[e["run_id"]]
            gaps.append(gap)
            if strict and gap < wait_s - EARLY_BOUND_S:
                v.flag("timers_early", f"run {e['run_id']} shipped {gap:.2f} s after its charge ({wait_s} s)")
    return {"min_gap_s": round(min(gaps), 2), "max_gap_s": round(max(gaps), 2)} if gaps else {}
