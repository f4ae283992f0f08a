"""Medians and spreads of the repetitions, and which engine measurements a repetition makes."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterator
from typing import Any

__all__ = [
    "BACKENDS",
    "ENGINES",
    "PER_BACKEND",
    "SHAPES",
    "aggregate",
    "entries",
    "plan",
    "rotated",
]

ENGINES = ("lockstep", "dbos", "dbos_wal", "absurd")
# Which engines each backend runs: DBOS's two SQLite journal modes; Absurd is PostgreSQL only.
PER_BACKEND = {"sqlite": ("lockstep", "dbos", "dbos_wal"), "postgresql": ("lockstep", "dbos", "absurd")}
SHAPES = ("embedded", "split")
BACKENDS = ("sqlite", "postgresql")


def _leaves(d: Any, prefix: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _leaves(v, f"{prefix}{k}.")
    elif isinstance(d, int | float) and not isinstance(d, bool):
        yield prefix[:-1], float(d)


def _fleet_medians(per_rep: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of every numeric result of every multi-process workload (worst case for the counts that
    must be zero), plus the errors and how many repetitions measured each."""
    values: dict[str, list[float]] = {}
    errors: list[str] = []
    for fleet in per_rep:
        for name, res in fleet.items():
            if "error" in res:
                errors.append(f"{name}: {res['error']}")
                continue
            for key, v in _leaves(res, f"{name}."):
                values.setdefault(key, []).append(v)
    out: dict[str, Any] = {
        k: (max(v) if k.endswith(("started_again", "fired_twice")) else _median(v)) for k, v in values.items()
    }
    out["repetitions"] = len(per_rep)
    out["errors"] = errors
    # how many repetitions ran each workload: one for those measured once per backend
    out["measured"] = dict(Counter(name for fleet in per_rep for name in fleet))
    return out


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _path(d: dict[str, Any], dotted: str) -> float | None:
    cur: Any = d
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return float(cur) if isinstance(cur, int | float) else None


ENGINE_METRICS = (
    "throughput.runs_per_s",
    "throughput.steps_per_s",
    "throughput_long.steps_per_s",
    "throughput.engine_ms_per_step",
    "throughput.db_ms_per_step",
    "throughput_long.engine_ms_per_step",
    "throughput_long.db_ms_per_step",
    # lockstep only: the plain and the sealed process interleaved (the cost of encryption)
    "throughput_plain.steps_per_s",
    "throughput_sealed.steps_per_s",
    "throughput.elapsed_s",
    "latency.p50_ms",
    "latency.p99_ms",
)
RAW_METRICS = ("sqlite_full", "sqlite_normal", "pg_1conn", "pg_4conn")


HARDWARE = (
    "one_connection_steps_per_s",
    "lockstep_recording_steps_per_s",
    "all_connections_steps_per_s",
    "statements_per_step",
    "rows_per_step",
    "connections",
)
SPREAD = ("throughput.steps_per_s", "throughput_long.steps_per_s")
NOT_ENGINES = {"raw", "fleet", "hardware"}


def entries(results: list[dict[str, Any]]) -> list[str]:
    """The engine entries (`engine`, `engine/split`, `engine/split@slots`) of one backend's results, in
    first-seen order."""
    return list(dict.fromkeys(k for res in results for k in res if k not in NOT_ENGINES))


def _spread(values: list[float]) -> list[float] | None:
    """[min, max] of the repetitions (None without any)."""
    return [min(values), max(values)] if values else None


def rotated(items: list[str], rep: int) -> list[str]:
    """`items` started at position rep (mod len): each repetition runs the engines in another order, so
    none always runs first (on a cold cache) or last (on a warm, fuller disk)."""
    if not items:
        return []
    k = rep % len(items)
    return items[k:] + items[:k]


def plan(
    backend: str, engines: list[str], shapes: list[str], slots: list[int]
) -> list[tuple[str, str, int | None]]:
    """(entry name, shape, concurrency) of every engine measurement of one backend and repetition."""
    out: list[tuple[str, str, int | None]] = []
    for engine in [e for e in PER_BACKEND[backend] if e in engines]:
        for shape in shapes:
            out.append((engine if shape == "embedded" else f"{engine}/{shape}", shape, None))
    if "lockstep" in engines and "split" in shapes:
        out += [(f"lockstep/split@{n}", "split", n) for n in slots]
    return out


def aggregate(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per backend: engines' metrics and raw commit rates, over the successful repetitions."""
    out: dict[str, Any] = {}
    for backend in [b for b in BACKENDS if any(b in r for r in reps)]:  # a stable order in the report
        per: dict[str, Any] = {}
        for engine in entries([r.get(backend, {}) for r in reps]):
            results = [r[backend][engine] for r in reps if engine in r.get(backend, {})]
            ok = [x for x in results if "error" not in x]
            per[engine] = {
                "repetitions_ok": len(ok),
                "errors": [x["error"] for x in results if "error" in x],
                **{m: _median([v for x in ok if (v := _path(x, m)) is not None]) for m in ENGINE_METRICS},
                "spread": {m: _spread([v for x in ok if (v := _path(x, m)) is not None]) for m in SPREAD},
            }
        raw = {}
        for m in RAW_METRICS:
            vals = [
                v for r in reps if (v := _path(r[backend].get("raw", {}), f"{m}.commits_per_s")) is not None
            ]
            if vals:
                raw[m] = _median(vals)
        per["raw_commits_per_s"] = raw
        per["fleet"] = _fleet_medians([r[backend].get("fleet", {}) for r in reps])
        hw = [
            r[backend]["hardware"] for r in reps if "error" not in r[backend].get("hardware", {"error": ""})
        ]
        per["hardware"] = {k: _median([v for h in hw if (v := _path(h, k)) is not None]) for k in HARDWARE}
        out[backend] = per
    return out
