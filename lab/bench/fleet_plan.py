"""The sizes of lockstep's multi-process workloads, which of them run once per backend rather than in
every repetition, and whether the disk can hold the databases they write.

The full sizes are issue 22's targets: 100,000 timers due at once, 1,000 -> 1,000,000 waiting runs,
1,000 interrupted runs. Loading a million waiting runs takes about 25 minutes on SQLite here (1.4 ms
per run through `start_many`) and writes ~3.8 KiB per run, so the two large workloads run once per
backend (`once`), and each workload's database is dropped as soon as its numbers are read.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

__all__ = [
    "BYTES_PER_RUN",
    "HEADROOM",
    "disk_needed",
    "disk_problem",
    "drop_database",
    "fleet_sizes",
    "runs_written",
]

# Measured database bytes per waiting run (approval links included; WAL and indexes), rounded up:
# SQLite 3.8 KiB, PostgreSQL 4.1 KiB plus its write-ahead log while loading.
BYTES_PER_RUN = {"sqlite": 4 * 1024, "postgresql": 6 * 1024}
HEADROOM = 2 * 2**30  # left free for everything else on the machine


def fleet_sizes(quick: bool) -> dict[str, Any]:
    """Each workload's arguments; `once`: measured in the first repetition only (too long to repeat)."""
    return {
        "two_workers": {"runs": 600 if quick else 2000},
        "tracing": {"runs": 300 if quick else 1000},
        "shapes": {"runs": 300 if quick else 1000},
        "recovery": {"runs": 1000},
        "timers": {"n": 2000 if quick else 100_000, "once": not quick},
        "waiting": {
            "points": [1000, 10_000] if quick else [1000, 10_000, 100_000, 1_000_000],
            "idle_s": 5.0 if quick else 10.0,
            "once": not quick,
        },
        "approval_round_trip": {"n": 10 if quick else 30},
    }


def runs_written(name: str, sizes: dict[str, Any]) -> int:
    """How many runs a workload leaves in its database (an upper bound)."""
    if name == "waiting":
        return int(max(sizes["points"]))
    if name == "timers":
        return int(sizes["n"]) + 500  # and one chunk due next week: the loading rate's probe
    if name in {"tracing", "shapes"}:
        return 3 * int(sizes["runs"])
    return int(sizes.get("runs", sizes.get("n", 0)))


def disk_needed(sizes: dict[str, dict[str, Any]], backends: list[str], wanted: list[str] | None) -> int:
    """Bytes the largest workload's database takes at once: each is dropped once measured, so the need
    is the largest one, not the sum."""
    need = 0
    for backend in backends:
        for name, s in sizes.items():
            if wanted is None or name in wanted:
                need = max(need, runs_written(name, s) * BYTES_PER_RUN[backend])
    return need


def disk_problem(where: Path, need: int) -> str | None:
    """Why `where` cannot hold `need` bytes plus the headroom, as a message saying what to do; None: it
    can."""
    free = shutil.disk_usage(where).free
    if free >= need + HEADROOM:
        return None
    gib = 2**30
    return (
        f"the multi-process workloads need about {need / gib:.1f} GiB free in {where} (plus "
        f"{HEADROOM / gib:.0f} GiB headroom) and only {free / gib:.1f} GiB is free: free some space, "
        "point TMPDIR at a larger disk, run `--quick`, or leave the large workloads out with "
        "`--fleet` (for example `--fleet two_workers,recovery,approval_round_trip`)"
    )


def drop_database(url: str) -> None:
    """Delete a measured workload's database (a SQLite file and its WAL, or a PostgreSQL database)."""
    if url.startswith("sqlite:///"):
        base = Path(url[len("sqlite:///") :])
        for p in base.parent.glob(base.name + "*"):  # the file, its WAL and the wake-up directory
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        return
    import psycopg  # noqa: PLC0415 - only a PostgreSQL run needs it

    server, _, name = url.rpartition("/")
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())
