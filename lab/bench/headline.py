"""The README's headline table, written from a report: `python -m lab.bench.headline reports/bench.json`.

The README quotes the benchmark; generating its table from `bench.json` (and a test that the README
holds exactly this table) keeps the numbers a reader sees the ones the report measured.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .aggregate import BACKENDS
from .report_engines import LABELS, per_step_cost_ratio, reference_peer, throughput_targets
from .report_engines import fmt as _n
from .report_fleet import waiting_points

__all__ = ["headline", "main"]

PROCESSES = ("serve", "scheduler", "worker")


def _x(a: float | None, b: float | None) -> str:
    return f"**{a / b:.2f}x**" if a is not None and b else "—"


def _rate(med: dict[str, Any], entry: str) -> float | None:
    value = med.get(entry, {}).get("throughput.steps_per_s")
    return None if value is None else float(value)


def _peers(backend: str, med: dict[str, Any], suffix: str) -> str:
    """lockstep's steps/s, then each peer's with lockstep's ratio to it."""
    lk = _rate(med, f"lockstep{suffix}")
    parts = [_n(lk, 0)]
    for p, _times in throughput_targets(backend):
        if (rate := _rate(med, f"{p}{suffix}")) is not None:
            parts.append(f"{LABELS[p]} {_n(rate, 0)} ({_x(lk, rate)})")
    return "; ".join(parts)


def _memory(fl: dict[str, Any], points: list[int]) -> str:
    """The largest growth of any process's RSS from the smallest to the largest waiting size."""
    lo, hi = (points[0], points[-1]) if points else (None, None)
    growth = [
        fl[f"waiting.{hi}.rss_mib.{p}"] / fl[f"waiting.{lo}.rss_mib.{p}"]
        for p in PROCESSES
        if fl.get(f"waiting.{lo}.rss_mib.{p}") and fl.get(f"waiting.{hi}.rss_mib.{p}") is not None
    ]
    return f"x{max(growth):.2f} at most" if growth else "—"


def headline(report: dict[str, Any]) -> str:
    """The table (markdown), one column per backend the report measured."""
    meds = report["medians"]
    backends = [b for b in BACKENDS if b in meds]
    fleet_sizes = report["sizes"].get("fleet", {})
    points = waiting_points(fleet_sizes)
    timers = int(fleet_sizes.get("timers", {}).get("n", 0))
    rows: list[tuple[str, list[str]]] = []

    def row(label: str, cell: Any) -> None:
        rows.append((label, [cell(b, meds[b], meds[b].get("fleet", {})) for b in backends]))

    row("steps/s, 3-activity runs, one process (lockstep; peers)", lambda b, m, _f: _peers(b, m, ""))
    row(
        "steps/s, production shape: a client process, two worker processes",
        lambda b, m, _f: _peers(b, m, "/split"),
    )
    row(
        "cost of a step in a 20-step run over a 3-step run's (CPU)",
        lambda _b, m, _f: f"x{_n(per_step_cost_ratio(m.get('lockstep', {})), 2)}",
    )
    row(
        "3-step run latency p50, ms (lockstep / DBOS, in WAL on SQLite)",
        lambda b, m, _f: (
            f"{_n(m.get('lockstep', {}).get('latency.p50_ms'), 1)} / "
            f"{_n(m.get(reference_peer(b), {}).get('latency.p50_ms'), 1)}"
        ),
    )
    row(
        "approval decided over HTTP to the next activity started, p50, ms",
        lambda _b, _m, f: _n(f.get("approval_round_trip.p50_ms"), 1),
    )
    row(
        "1,000 runs, every engine process SIGKILLed: restart to all completed, s",
        lambda _b, _m, f: _n(f.get("recovery.recovery_s"), 2),
    )
    row(
        f"{timers:,} timers due in the same instant: all fired, s (fired twice)",
        lambda _b, _m, f: f"{_n(f.get('timers.all_fired_s'), 2)} ({_n(f.get('timers.fired_twice'), 0)})",
    )
    if points:
        row(
            f"RSS of serve, scheduler and worker from {points[0]:,} to {points[-1]:,} waiting runs",
            lambda _b, _m, f: _memory(f, points),
        )
    out = ["| | " + " | ".join("SQLite" if b == "sqlite" else "PostgreSQL" for b in backends) + " |"]
    out.append("|---|" + "---:|" * len(backends))
    out += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in rows]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.bench.headline", description=__doc__.split("\n\n")[0])
    p.add_argument("report", type=Path, nargs="?", default=Path("reports/bench.json"))
    args = p.parse_args(argv)
    try:
        report = json.loads(args.report.read_text())
        sys.stdout.write(headline(report))
    except (OSError, json.JSONDecodeError, KeyError) as exc:
        print(f"cannot read the report {args.report}: {exc!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
