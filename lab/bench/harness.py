"""Runs every workload on every engine and backend, takes medians, writes reports/bench.{md,json}."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from lockstep.testing import PgCluster

from .. import lab_env
from ..fleet import database, postgres
from .absurd_side import absurd_missing, absurd_version
from .aggregate import BACKENDS, ENGINES, SHAPES, aggregate, entries, plan, rotated
from .common import MARKER
from .dbos_side import dbos_version
from .fleet_plan import disk_needed, disk_problem, drop_database, fleet_sizes
from .fleet_side import WORKLOADS as FLEET_WORKLOADS
from .raw import pg_commits, sqlite_commits
from .report import write_reports
from .shapes import shapes
from .traced import tracing

__all__ = ["main"]

WORKLOADS = {**FLEET_WORKLOADS, "tracing": tracing, "shapes": shapes}


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


def _child(
    engine: str, url: str, args: argparse.Namespace, shape: str = "embedded", concurrency: int | None = None
) -> dict[str, Any]:
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
        str(concurrency or args.concurrency),
        "--shape",
        shape,
        "--workers",
        str(args.workers),
        "--long-steps",
        str(args.long_steps),
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


def _hardware(backend: str, rep: int, tmp: Path, cluster: PgCluster | None, args: argparse.Namespace) -> Any:
    """The hardware limit (lab.bench.hardware) in its own process: one trace database, one replay
    database for one connection and, on PostgreSQL, one per core replayed at once."""
    n = 1 if backend == "sqlite" else 1 + len(os.sched_getaffinity(0))
    urls = [database(backend, f"hw_{rep}_{i}", tmp, cluster) for i in range(n + 1)]
    cmd = [sys.executable, "-m", "lab.bench.hardware", "--trace-url", urls[0], "--runs", str(args.runs)]
    for u in urls[1:]:
        cmd += ["--replay-url", u]
    proc = subprocess.run(  # noqa: S603 - our own module, fixed arguments
        cmd, stdout=subprocess.PIPE, text=True, timeout=args.timeout * 3, check=False, env=lab_env(os.environ)
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARKER)]
    if not lines:
        return {"error": f"hardware limit: exited {proc.returncode} without a result"}
    return json.loads(lines[-1][len(MARKER) :])


def _fleet(
    backend: str, rep: int, tmp: Path, cluster: PgCluster | None, args: argparse.Namespace
) -> dict[str, Any]:
    """lockstep's multi-process workloads, each on a fresh database; a failure is recorded, not raised."""
    out: dict[str, Any] = {}
    for name, sizes in fleet_sizes(args.quick).items():
        if args.fleet is not None and name not in args.fleet:
            continue
        if backend == "postgresql" and cluster is None:
            continue
        kwargs = dict(sizes)
        if kwargs.pop("once", False) and rep > 0:
            continue  # measured once per backend, in the first repetition
        url = database(backend, f"fleet_{name}_{rep}", tmp, cluster)
        _say(f"repetition {rep + 1}/{args.repeat}, {backend}: lockstep {name}")
        if name != "waiting":
            kwargs["timeout"] = args.timeout
        try:
            out[name] = WORKLOADS[name](url, tmp / f"fleet-{backend}-{name}-{rep}", **kwargs)
        except Exception as exc:
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
            _say(f"  {name} on {backend} failed: {out[name]['error']}")
        try:
            drop_database(url)  # measured: a large database no longer holds the disk
        except Exception as exc:  # the numbers are in; a database left behind goes with the directory
            _say(f"  could not drop the database of {name} on {backend}: {exc}")
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
        if "lockstep" in engines and not args.no_hardware and (backend == "sqlite" or cluster is not None):
            _say(f"repetition {rep + 1}/{args.repeat}, {backend}: hardware limit (record, replay)")
            res["hardware"] = _hardware(backend, rep, tmp, cluster, args)
        if "lockstep" in engines and not args.no_fleet:
            res["fleet"] = _fleet(backend, rep, tmp, cluster, args)
        todo = {name: (shape, conc) for name, shape, conc in plan(backend, engines, args.shapes, args.slots)}
        for name in rotated(list(todo), rep):
            shape, conc = todo[name]
            engine = name.split("/")[0]
            if engine == "absurd" and (why := absurd_missing()) is not None:
                res[name] = {"error": f"not run: {why}"}
                continue
            db = f"bench_{name.replace('/', '_').replace('@', '_')}_{rep}"
            url = database(backend, db, tmp, cluster)
            _say(f"repetition {rep + 1}/{args.repeat}, {backend}: {name}")
            res[name] = _child(engine, url, args, shape, conc)
            if "error" in res[name]:
                _say(f"  {name} on {backend} failed: {res[name]['error']}")
        one[backend] = res
    return one


def _refuse(why: str) -> NoReturn:
    """Exit as argparse does on a usage error: the machine lacks what the command line asks for."""
    print(f"python -m lab.bench: error: {why}", file=sys.stderr)
    raise SystemExit(2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked and with its lists split (backends, engines, shapes, slots, fleet);
    what the machine must have (DBOS installed, disk space) is checked by `main`."""
    p = argparse.ArgumentParser(prog="python -m lab.bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="small sizes (200 runs) for a run of a few minutes")
    p.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated: sqlite,postgresql")
    p.add_argument(
        "--engines", default=",".join(ENGINES), help="comma-separated: lockstep,dbos,dbos_wal,absurd"
    )
    p.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated: embedded,split")
    p.add_argument("--workers", type=int, default=2, help="worker processes of the split shape")
    p.add_argument("--slots", default="4,8,16", help="lockstep worker slots measured in the split shape")
    p.add_argument("--long-steps", type=int, default=20, help="steps of the long runs")
    p.add_argument("--repeat", type=int, default=3, help="repetitions; the report quotes medians")
    p.add_argument("--runs", type=int, help="throughput runs (default 2000, --quick 200)")
    p.add_argument("--latency-runs", type=int, help="sequential latency runs (default 200, --quick 30)")
    p.add_argument("--raw-commits", type=int, help="commits per raw measurement (default 5000, --quick 1000)")
    p.add_argument("--concurrency", type=int, default=16, help="lockstep worker concurrency")
    p.add_argument("--poll-ms", type=float, default=50.0, help="lockstep worker poll interval")
    p.add_argument("--timeout", type=float, default=900.0, help="per-workload timeout, seconds")
    p.add_argument("--out", default="reports", help="directory for bench.md and bench.json")
    p.add_argument("--no-hardware", action="store_true", help="skip the hardware limit (record and replay)")
    p.add_argument(
        "--fleet",
        help=f"comma-separated multi-process workloads (default all): {', '.join(fleet_sizes(False))}",
    )
    p.add_argument("--no-fleet", action="store_true", help="skip the multi-process workloads (lockstep only)")
    args = p.parse_args(argv)
    args.runs = args.runs or (200 if args.quick else 2000)
    args.latency_runs = args.latency_runs or (30 if args.quick else 200)
    args.raw_commits = args.raw_commits or (1000 if args.quick else 5000)
    args.shapes = [x for x in args.shapes.split(",") if x]
    args.fleet = None if args.fleet is None else [x for x in args.fleet.split(",") if x]
    if args.fleet and (unknown_fleet := set(args.fleet) - set(fleet_sizes(False))):
        p.error(f"unknown multi-process workload: {', '.join(sorted(unknown_fleet))}")
    args.slots = [int(x) for x in args.slots.split(",") if x]
    args.backends = [b for b in args.backends.split(",") if b]
    args.engines = [e for e in args.engines.split(",") if e]
    if unknown := (set(args.backends) - set(BACKENDS)) | (set(args.engines) - set(ENGINES)):
        p.error(f"unknown backend/engine: {', '.join(sorted(unknown))}")
    if set(args.shapes) - set(SHAPES):
        p.error(f"unknown shape: {', '.join(sorted(set(args.shapes) - set(SHAPES)))}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    backends, engines = args.backends, args.engines
    if {"dbos", "dbos_wal"} & set(engines) and dbos_version() is None:
        _refuse("DBOS is not installed: pip install -e '.[bench]' (or drop it with --engines lockstep)")
    if "lockstep" in engines and not args.no_fleet:
        need = disk_needed(fleet_sizes(args.quick), backends, args.fleet)
        if (why := disk_problem(Path(tempfile.gettempdir()), need)) is not None:
            _refuse(why)

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
        "issue": 22,
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
            "long_steps": args.long_steps,
            "workers": args.workers,
            "slots": args.slots,
            "repeat": args.repeat,
        },
        "machine": machine(),
        "versions": {
            "lockstep": _version("lockstep"),
            "dbos": dbos_version(),
            "absurd-sdk": absurd_version(),
            "psycopg": _version("psycopg"),
            "sqlalchemy": _version("sqlalchemy"),
            "postgresql_server": pg_server,
        },
        "medians": aggregate(reps),
        "repetitions": reps,
    }
    md, js = write_reports(report, Path(args.out))
    _say(f"wrote {md} and {js}")
    failed = any("error" in r[b][e] for r in reps for b in r for e in entries([r[b]]))
    return 1 if failed else 0
