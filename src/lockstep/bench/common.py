"""What both engines' workloads share: the result shape, percentiles, the child-process protocol."""

from __future__ import annotations

import json
import math
import statistics
from typing import Any

__all__ = ["MARKER", "emit", "percentile", "summarize_latencies"]

# A child prints exactly one line starting with MARKER followed by its JSON result; engines may log freely.
MARKER = "LOCKSTEP-BENCH-RESULT "


def emit(result: dict[str, Any]) -> None:
    print(MARKER + json.dumps(result), flush=True)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summarize_latencies(samples_s: list[float]) -> dict[str, Any]:
    ms = [s * 1000 for s in samples_s]
    return {
        "samples": len(ms),
        "p50_ms": percentile(ms, 50),
        "p99_ms": percentile(ms, 99),
        "mean_ms": statistics.fmean(ms),
        "max_ms": max(ms),
    }
