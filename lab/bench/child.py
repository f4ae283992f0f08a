"""One engine on one fresh database, in its own process: `python -m lab.bench.child ...`.

Each (engine, backend, repetition) runs in a separate process so DBOS's process-wide singleton, thread
pools and caches never leak from one measurement into the next.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable
from typing import Any

from .common import emit

__all__ = ["main"]


ENGINES = ("lockstep", "dbos", "dbos_wal", "absurd")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.bench.child")
    p.add_argument("--engine", choices=ENGINES, required=True)
    p.add_argument("--shape", choices=["embedded", "split"], default="embedded")
    p.add_argument("--url", required=True)
    p.add_argument("--throughput-runs", type=int, required=True)
    p.add_argument("--latency-runs", type=int, required=True)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--workers", type=int, default=2, help="worker processes of the split shape")
    p.add_argument("--long-steps", type=int, default=20)
    p.add_argument("--poll-ms", type=float, default=50.0)
    p.add_argument("--timeout", type=float, default=600.0)
    a = p.parse_args(argv)

    def log(msg: str) -> None:
        print(f"  [{a.engine}] {msg}", file=sys.stderr, flush=True)

    try:
        emit(_run(a, log))
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the parent reports it
        return 130
    except Exception as exc:
        traceback.print_exc()
        emit({"error": f"{type(exc).__name__}: {exc}"})
        return 1
    return 0


def _run(a: argparse.Namespace, log: Callable[[str], None]) -> dict[str, Any]:
    # each child imports one engine only
    if a.shape == "split":
        from .split_side import run_split  # noqa: PLC0415

        return run_split(
            a.engine,
            a.url,
            throughput_runs=a.throughput_runs,
            workers=a.workers,
            concurrency=a.concurrency,
            timeout=a.timeout,
            long_steps=a.long_steps,
            log=log,
        )
    common = {
        "throughput_runs": a.throughput_runs,
        "latency_runs": a.latency_runs,
        "warmup": a.warmup,
        "timeout": a.timeout,
        "long_steps": a.long_steps,
        "log": log,
    }
    if a.engine == "lockstep":
        from .lockstep_side import run_lockstep  # noqa: PLC0415

        return run_lockstep(a.url, concurrency=a.concurrency, poll_ms=a.poll_ms, **common)
    if a.engine == "absurd":
        from .absurd_side import run_absurd  # noqa: PLC0415

        return run_absurd(a.url, concurrency=a.concurrency, **common)
    from .dbos_side import run_dbos  # noqa: PLC0415

    return run_dbos(a.url, wal=a.engine == "dbos_wal", **common)


if __name__ == "__main__":
    raise SystemExit(main())
