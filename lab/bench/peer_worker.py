"""A worker process of a peer engine in the production shape: `python -m lab.bench.peer_worker
--engine dbos|absurd --url URL --concurrency N`; prints READY once it runs, then works until killed."""

from __future__ import annotations

import argparse

__all__ = ["READY", "main"]

READY = "LOCKSTEP-BENCH-READY"


def _ready() -> None:
    print(READY, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.bench.peer_worker")
    p.add_argument("--engine", choices=["dbos", "absurd"], required=True)
    p.add_argument("--url", required=True)
    p.add_argument("--concurrency", type=int, default=16)
    a = p.parse_args(argv)
    if a.engine == "dbos":
        from .dbos_side import worker_main  # noqa: PLC0415 - each process imports one engine
    else:
        from .absurd_side import worker_main  # noqa: PLC0415 - each process imports one engine
    try:
        worker_main(a.url, a.concurrency, _ready)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
