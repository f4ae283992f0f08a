"""One engine on one fresh database, in its own process: `python -m lab.bench.child ...`.

Each (engine, backend, repetition) runs in a separate process so DBOS's process-wide singleton, thread
pools and caches never leak from one measurement into the next.
"""

from __future__ import annotations

import argparse
import sys
import traceback

from .common import emit

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.bench.child")
    p.add_argument("--engine", choices=["lockstep", "dbos"], required=True)
    p.add_argument("--url", required=True)
    p.add_argument("--throughput-runs", type=int, required=True)
    p.add_argument("--latency-runs", type=int, required=True)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--poll-ms", type=float, default=50.0)
    p.add_argument("--timeout", type=float, default=600.0)
    a = p.parse_args(argv)

    def log(msg: str) -> None:
        print(f"  [{a.engine}] {msg}", file=sys.stderr, flush=True)

    try:
        if a.engine == "lockstep":
            from .lockstep_side import run_lockstep  # noqa: PLC0415 - each child imports one engine

            result = run_lockstep(
                a.url,
                throughput_runs=a.throughput_runs,
                latency_runs=a.latency_runs,
                warmup=a.warmup,
                concurrency=a.concurrency,
                poll_ms=a.poll_ms,
                timeout=a.timeout,
                log=log,
            )
        else:
            from .dbos_side import run_dbos  # noqa: PLC0415 - each child imports one engine

            result = run_dbos(
                a.url,
                throughput_runs=a.throughput_runs,
                latency_runs=a.latency_runs,
                warmup=a.warmup,
                timeout=a.timeout,
                log=log,
            )
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the parent reports it
        return 130
    except Exception as exc:
        traceback.print_exc()
        emit({"error": f"{type(exc).__name__}: {exc}"})
        return 1
    emit(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
