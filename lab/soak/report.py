"""reports/soak.md and reports/soak.json from one soak's result: the verdict first, then the faults,
the load, latency per minute, memory and open files per process per minute, and database growth.

"Flat memory" is judged per lockstep process that lived at least `LONG_LIVED_MIN` minutes: its RSS at
the end within 25% (+16 MiB) of its RSS after its first `WARM_MIN` minutes, and its open files within
+16. The driver's own row is shown for scale but not judged: it keeps every run it saw, by design.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

__all__ = ["flatness", "markdown", "write"]

LONG_LIVED_MIN = 10.0
WARM_MIN = 5.0


def flatness(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per long-lived process: RSS and fds once warm and at its last sample, and whether that is flat."""
    series: defaultdict[tuple[str, int], list[tuple[float, float, int]]] = defaultdict(list)
    for row in samples:
        for slot, p in row["procs"].items():
            series[(slot, p["pid"])].append((row["minute"], p["rss_mib"], p["fds"]))
    out = []
    for (slot, pid), points in sorted(series.items()):
        if points[-1][0] - points[0][0] < LONG_LIVED_MIN:
            continue
        warm = next(p for p in points if p[0] - points[0][0] >= WARM_MIN)
        last = points[-1]
        # The driver (load, checker, sampler) keeps every run it saw: shown, never judged.
        flat = slot == "driver" or (last[1] <= warm[1] * 1.25 + 16 and last[2] <= warm[2] + 16)
        out.append(
            {
                "process": slot,
                "pid": pid,
                "minutes": round(last[0] - points[0][0], 1),
                "rss_warm_mib": warm[1],
                "rss_end_mib": last[1],
                "rss_max_mib": max(p[1] for p in points),
                "fds_warm": warm[2],
                "fds_end": last[2],
                "flat": flat,
            }
        )
    return out


def write(result: dict[str, Any], out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    result = {**result, "flatness": flatness(result["samples"])}
    result["passed"] = not any(result["violations"].values()) and all(p["flat"] for p in result["flatness"])
    js = out / "soak.json"
    js.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    md = out / "soak.md"
    md.write_text(markdown(result))
    return md, js


def markdown(r: dict[str, Any]) -> str:
    s = r["settings"]
    found = {k: n for k, n in r["violations"].items() if n}
    memory = "flat" if all(p["flat"] for p in r["flatness"]) else "NOT flat"
    every = s["fault_interval_s"]
    lines = [
        "# Soak: mixed faults on PostgreSQL",
        "",
        "Written by `make soak` (`python -m lab.soak`); do not edit by hand.",
        "",
        f"**{'PASSED' if r['passed'] else 'FAILED'}**: {round(s['duration_s'] / 60, 1)} minutes of load and "
        f"faults ({r['duration_min']} in all with the drain and the checks), {r['runs']} runs, "
        f"{sum(r['faults'].values())} faults injected, "
        f"{sum(found.values())} violations, memory {memory}.",
        "",
        f"Settings: seed {s['seed']}, {s['rate']} starts/s, a fault every {every} s on average, "
        f"2 servers, 2 schedulers, 3 workers (w2 delivers every attempt twice, w3 reaches PostgreSQL "
        f"through the partition proxy), three processes (pay, pay-parallel, pay-approved) decided by "
        f"three approvers. Drain after the faults stopped: {r['drain_s']} s.",
        "",
        "## Verdict",
        "",
        "| check | violations |",
        "|---|---|",
        *[f"| {k} | {n} |" for k, n in sorted(r["violations"].items())],
        "",
    ]
    for k, examples in sorted(r["examples"].items()):
        if r["violations"].get(k):
            lines += [f"- {k}: " + "; ".join(e.replace("|", "/") for e in examples[:3])]
    lines += ["", "Outcomes: " + ", ".join(f"{k} {n}" for k, n in sorted(r["outcomes"].items())), ""]
    passes = [p for p in r["periodic_checks"] if "runs" in p]
    lines += [
        f"Periodic checks during the faults: {len(passes)} passes"
        + (
            f" (runs seen: {', '.join(str(p['runs']) for p in passes)}), violations "
            f"{', '.join(str(p['violations']) for p in passes)}"
            if passes
            else ""
        ),
        "",
        "## Faults injected",
        "",
        "| kind | injected | skipped |",
        "|---|---|---|",
        *[
            f"| {k} | {n} | {r['faults_skipped'].get(k, 0)} |"
            for k, n in sorted({**dict.fromkeys(r["faults_skipped"], 0), **r["faults"]}.items())
        ],
        "",
        "What they did: " + ", ".join(f"{k} {n}" for k, n in sorted(r["fault_details"].items())),
        "",
        f"Processes: {r['cluster']['deaths_expected']} killed by the schedule and restarted; "
        f"{len(r['cluster']['deaths_unexpected'])} died on their own; "
        f"generations per slot {r['cluster']['generations']}.",
        "",
        "## Load as the clients saw it",
        "",
        *[f"- {k}: {n}" for k, n in sorted(r["load"].items())],
        "",
        "## Latency per minute (start to end, runs without an approval)",
        "",
        "| minute | finished | p50 s | p99 s | with approval p50 s |",
        "|---|---|---|---|---|",
        *[
            f"| {m['minute']} | {m['finished']} | {m['p50_s']} | {m['p99_s']} | {m['approval_p50_s']} |"
            for m in r["latency"]
        ],
        "",
        "## Memory and open files",
        "",
        "Every process that lived 10 minutes or more (RSS once warm, i.e. after its first 5 minutes, "
        "against its last sample; the driver, which keeps every run it saw, is shown but not judged):",
        "",
        "| process | pid | minutes | RSS warm MiB | RSS end MiB | RSS max MiB | fds warm | fds end | flat |",
        "|---|---|---|---|---|---|---|---|---|",
        *[
            f"| {p['process']} | {p['pid']} | {p['minutes']} | {p['rss_warm_mib']} | {p['rss_end_mib']} | "
            f"{p['rss_max_mib']} | {p['fds_warm']} | {p['fds_end']} | {'yes' if p['flat'] else 'NO'} |"
            for p in r["flatness"]
        ],
        "",
        "Per minute (RSS MiB / open fds of each process alive then; PostgreSQL's processes together):",
        "",
        "| minute | load avg | runs | db MiB | PostgreSQL MiB | processes |",
        "|---|---|---|---|---|---|",
        *[
            f"| {row['minute']} | {row.get('load1', '')} | {row['runs']} | {row['db_mib']} | "
            f"{row['postgres_rss_mib']} | "
            + ", ".join(f"{k} {p['rss_mib']}/{p['fds']}" for k, p in sorted(row["procs"].items()))
            + " |"
            for row in r["samples"]
        ],
        "",
        "## Database growth",
        "",
        f"{r['db_mib'][0]} MiB before, {r['db_mib'][1]} MiB after: {r['db_bytes_per_run']} bytes per run "
        "(events, snapshots, tasks, outbox and indexes; no retention purge ran).",
        "",
    ]
    return "\n".join(lines)
