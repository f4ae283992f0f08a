"""Activities of the benchmark's multi-process workloads (`lockstep worker --activities
lab.bench.activities`): `bench.noop` does nothing; `bench.record` appends one line per execution
(wall time, run, step, attempt, pid) to the file in $LOCKSTEP_BENCH_RECORD, written before it returns,
so the harness knows when an activity started and that no completed step ever ran again.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from lockstep.runtime.activity import ActivityContext, activity

__all__ = ["RECORD_ENV", "noop", "record"]

RECORD_ENV = "LOCKSTEP_BENCH_RECORD"


@activity("bench.noop")
def noop(data: dict[str, Any] | None) -> dict[str, Any]:
    return {"n": (data or {}).get("n")}


@activity("bench.record")
def record(data: dict[str, Any] | None, ctx: ActivityContext) -> dict[str, Any]:
    line = json.dumps({"t": time.time(), "run": ctx.run_id, "step": ctx.step_id, "attempt": ctx.attempt})
    # O_APPEND with one write per line: lines of concurrent threads and processes never interleave.
    fd = os.open(os.environ[RECORD_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line[:-1] + f', "pid": {os.getpid()}}}\n').encode())
    finally:
        os.close(fd)
    sleep_ms = (data or {}).get("sleep_ms", 0)
    if sleep_ms:
        time.sleep(sleep_ms / 1000)
    return {"n": (data or {}).get("n")}
