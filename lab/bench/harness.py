"""Runs every workload on every engine and backend, takes medians, writes reports/bench.{md,json}."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lockstep.testing import PgCluster

from .. import lab_env
from ..fleet import database, postgres
from .common import MARKER
from .dbos_side import dbos_version
from .fleet_side import WORKLOADS as FLEET_WORKLOADS
from .raw import pg_commits, sqlite_commits
from .report import write_reports
from .shapes import shapes
from .traced import tracing

__all__ = ["main"]

ENGINES = ("lockstep", "dbos")
WORKLOADS = {**FLEET_WORKLOADS, "tracing": tracing, "shapes": shapes}
BACKENDS = ("sqlite", "postgresql")


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine() -> dict[str, Any]:
    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kb = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "cpu_model": model,
        "mem_total_mib": mem_kb // 1024 if mem_kb else None,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
    }


def _child(engine: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "lab.bench.child",
        "--engine",
        engine,
        "--url",
        url,
        "--throughput-runs",
        str(args.runs),
        "--latency-runs",
        str(args.latency_runs),
        "--concurrency",
        str(args.concurrency),
        "--poll-ms",
        str(args.poll_ms),
        "--timeout",
        str(args.timeout),
    ]
    t0 = time.monotonic()
    proc = subprocess.run(  # noqa: S603 - our own module, fixed arguments
        cmd, stdout=subprocess.PIPE, text=True, timeout=args.timeout * 3, check=False, env=lab_env(os.environ)
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARKER)]
    if not lines:
        return {"error": f"child exited {proc.returncode} without a result", "wall_s": time.monotonic() - t0}
    result: dict[str, Any] = json.loads(lines[-1][len(MARKER) :])
    result["wall_s"] = time.monotonic() - t0
    return result


def fleet_sizes(quick: bool) -> dict[str, Any]:
    return {
        "two_workers": {"runs": 600 if quick else 2000},
        "tracing": {"runs": 300 if quick else 1000},
        "shapes": {"runs": 300 if quick else 1000},
        "recovery": {"runs": 1000},
        "timers": {"n": 2000 if quick else 20_000},
        "waiting": {"small": 1000, "large": 10_000 if quick else 100_000, "idle_s": 5.0 if quick else 10.0},
        "approval_round_trip": {"n": 10 if quick else 30},
    }


def _fleet(
    backend: str, rep: int, tmp: Path, cluster: PgCluster | None, args: argparse.Namespace
) -> dict[str, Any]:
    """lockstep's multi-process workloads, each on a fresh database; a failure is recorded, not raised."""
    out: dict[str, Any] = {}
    for name, sizes in fleet_sizes(args.quick).items():
        if backend == "postgresql" and cluster is None:
            continue
        url = database(backend, f"fleet_{name}_{rep}", tmp, cluster)
        _say(f"repetition {rep + 1}/{args.repeat}, {backend}: lockstep {name}")
        kwargs = dict(sizes)
        if name != "waiting":
            kwargs["timeout"] = args.timeout
        try:
            out[name] = WORKLOADS[name](url, tmp / f"fleet-{backend}-{name}-{rep}", **kwargs)
        except Exception as exc:
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
            _say(f"  {name} on {backend} failed: {out[name]['error']}")
    return out


def _leaves(d: Any, prefix: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _leaves(v, f"{prefix}{k}.")
    elif isinstance(d, int | float) and not isinstance(d, bool):
        yield prefix[:-1], float(d)


def _fleet_medians(per_rep: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of every numeric result of every multi-process workload (worst case for the counts that
    must be zero), plus the errors."""
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
    # lockstep only: the plain and the sealed process interleaved (the cost of encryption)
    "throughput_plain.steps_per_s",
    "throughput_sealed.steps_per_s",
    "throughput.elapsed_s",
    "latency.p50_ms",
    "latency.p99_ms",
)
RAW_METRICS = ("sqlite_full", "sqlite_normal", "pg_1conn", "pg_4conn")


def aggregate(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per backend: engines' metrics and raw commit rates, over the successful repetitions."""
    out: dict[str, Any] = {}
    for backend in [b for b in BACKENDS if any(b in r for r in reps)]:  # a stable order in the report
        per: dict[str, Any] = {}
        for engine in ENGINES:
            results = [r[backend][engine] for r in reps if engine in r.get(backend, {})]
            ok = [x for x in results if "error" not in x]
            if not results:
                continue
            per[engine] = {
                "repetitions_ok": len(ok),
                "errors": [x["error"] for x in results if "error" in x],
                **{m: _median([v for x in ok if (v := _path(x, m)) is not None]) for m in ENGINE_METRICS},
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
        out[backend] = per
    return out


def _repetition(
    rep: int,
    backends: list[str],
    engines: list[str],
    tmp: Path,
    cluster: PgCluster | None,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """One repetition: raw commit rates, the multi-process workloads and each engine, per backend."""
    one: dict[str, Any] = {}
    for backend in backends:
        res: dict[str, Any] = {}
        _say(f"repetition {rep + 1}/{args.repeat}, {backend}: raw commits")
        if backend == "sqlite":
            res["raw"] = {
                "sqlite_full": sqlite_commits(tmp / f"raw-{rep}.db", args.raw_commits, "FULL"),
                "sqlite_normal": sqlite_commits(tmp / f"raw-{rep}.db", args.raw_commits, "NORMAL"),
            }
        elif cluster is not None:
            raw_url = cluster.create_database(f"bench_raw_{rep}")
            res["raw"] = {
                "pg_1conn": pg_commits(raw_url, args.raw_commits, 1),
                "pg_4conn": pg_commits(raw_url, args.raw_commits, 4),
            }
        if "lockstep" in engines and not args.no_fleet:
            res["fleet"] = _fleet(backend, rep, tmp, cluster, args)
        for engine in engines:
            url = database(backend, f"bench_{engine}_{rep}", tmp, cluster)
            _say(f"repetition {rep + 1}/{args.repeat}, {backend}: {engine}")
            res[engine] = _child(engine, url, args)
            if "error" in res[engine]:
                _say(f"  {engine} on {backend} failed: {res[engine]['error']}")
        one[backend] = res
    return one


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="small sizes (200 runs) for a run of a few minutes")
    p.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated: sqlite,postgresql")
    p.add_argument("--engines", default=",".join(ENGINES), help="comma-separated: lockstep,dbos")
    p.add_argument("--repeat", type=int, default=3, help="repetitions; the report quotes medians")
    p.add_argument("--runs", type=int, help="throughput runs (default 2000, --quick 200)")
    p.add_argument("--latency-runs", type=int, help="sequential latency runs (default 200, --quick 30)")
    p.add_argument("--raw-commits", type=int, help="commits per raw measurement (default 5000, --quick 1000)")
    p.add_argument("--concurrency", type=int, default=16, help="lockstep worker concurrency")
    p.add_argument("--poll-ms", type=float, default=50.0, help="lockstep worker poll interval")
    p.add_argument("--timeout", type=float, default=900.0, help="per-workload timeout, seconds")
    p.add_argument("--out", default="reports", help="directory for bench.md and bench.json")
    p.add_argument("--no-fleet", action="store_true", help="skip the multi-process workloads (lockstep only)")
    args = p.parse_args(argv)
    args.runs = args.runs or (200 if args.quick else 2000)
    args.latency_runs = args.latency_runs or (30 if args.quick else 200)
    args.raw_commits = args.raw_commits or (1000 if args.quick else 5000)
    backends = [b for b in args.backends.split(",") if b]
    engines = [e for e in args.engines.split(",") if e]
    if unknown := (set(backends) - set(BACKENDS)) | (set(engines) - set(ENGINES)):
        p.error(f"unknown backend/engine: {', '.join(sorted(unknown))}")
    if "dbos" in engines and dbos_version() is None:
        p.error("DBOS is not installed: pip install -e '.[bench]' (or drop it with --engines lockstep)")

    began = datetime.now(UTC)
    tmp = Path(tempfile.mkdtemp(prefix="lockstep-bench-"))
    if "postgresql" in backends:
        _say("starting a throwaway PostgreSQL cluster")
    try:
        with postgres("postgresql" in backends) as cluster:
            pg_server = str(cluster.sql("SHOW server_version")[0][0]) if cluster is not None else None
            reps = [_repetition(rep, backends, engines, tmp, cluster, args) for rep in range(args.repeat)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    report = {
        "issue": 8,
        "began": began.isoformat(timespec="seconds"),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python -m lab.bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "quick": args.quick,
        "sizes": {
            "fleet": fleet_sizes(args.quick),
            "throughput_runs": args.runs,
            "latency_runs": args.latency_runs,
            "latency_warmup": 5,
            "raw_commits": args.raw_commits,
            "repeat": args.repeat,
        },
        "machine": machine(),
        "versions": {
            "lockstep": _version("lockstep"),
            "dbos": dbos_version(),
            "psycopg": _version("psycopg"),
            "sqlalchemy": _version("sqlalchemy"),
            "postgresql_server": pg_server,
        },
        "medians": aggregate(reps),
        "repetitions": reps,
    }
    md, js = write_reports(report, Path(args.out))
    _say(f"wrote {md} and {js}")
    failed = any("error" in r[b][e] for r in reps for b in r for e in engines if e in r[b])
    return 1 if failed else 0
