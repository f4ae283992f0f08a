"""Clocks that jump: workers and schedulers under libfaketime (Debian's `faketime`), their clocks set
minutes ahead, minutes behind, and stepped while runs go on.

PostgreSQL: each process has a clock of its own (as on hosts that disagree); the database's clock
decides (app/dbclock.py), so no lease is taken from a live worker and no timer fires early. A second
scheduler keeps the right time, so each scheduler's decisions meet leases and timers the other's clock
would judge differently.
SQLite: every process of a database shares one host, so the clock that steps is the host's: all engine
processes step together (forward, mid-run); the leases in flight at that moment may expire (fencing
rejects their late results) and timers armed before it fire early by the step, by design
(docs/design.md, "Whose clock decides what"): the checker sees no violation.

The wall clock is faked, not the monotonic one (FAKETIME_DONT_FAKE_MONOTONIC): a real clock step (NTP,
`date -s`) never moves CLOCK_MONOTONIC.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from ..fleet import Proc
from .base import Ctx, pay_definition, settle_time, start_runs
from .checker import Verdict
from .clockcheck import check_clocks
from .faultfleet import FaultFleet

__all__ = ["FAKETIME_LIB", "clock_jumps", "faked_env"]

FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
WAIT_S = 1.5


def faked_env(base: dict[str, str], rc: Path) -> dict[str, str]:
    """A process environment whose wall clock is offset by what `rc` says (`+10m`, `-600`), re-read
    every second: writing the file steps the process's clock."""
    return {
        **base,
        "LD_PRELOAD": FAKETIME_LIB,
        "FAKETIME_TIMESTAMP_FILE": str(rc),
        "FAKETIME_CACHE_DURATION": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def _step(rc: Path, offset: str) -> None:
    tmp = rc.with_suffix(".tmp")
    tmp.write_text(offset + "\n")
    os.replace(tmp, rc)  # libfaketime never reads half a file


def _faked(f: FaultFleet, name: str, args: list[str], rc: Path, ready: str) -> Proc:
    proc = f.popen(name, [sys.executable, "-m", "lockstep", "--db", f.db_url, *args], faked_env(f.env, rc))
    f.wait_ready(proc, ready)
    return proc


def _worker(f: FaultFleet, name: str, rc: Path) -> Proc:
    args = ["worker", "--activities", f.activities, "--worker-id", name, "--poll-interval", "50ms"]
    args += ["--concurrency", "8", "--lease-ttl", "2s", "--no-scheduler"]
    return _faked(f, name, args, rc, "serving")


def clock_jumps(ctx: Ctx) -> tuple[Verdict, float | None]:
    """Workers 10 minutes ahead and behind, a worker and the scheduler stepped forward and back by 10
    minutes mid-run (PostgreSQL); every process stepped forward by 10 minutes at once (SQLite)."""
    f = ctx.fleet
    if not Path(FAKETIME_LIB).exists():
        raise RuntimeError(f"{FAKETIME_LIB} is missing: apt-get install faketime")
    f.engine.publish(pay_definition(wait=f"{int(WAIT_S * 1000)}ms"), tenant=ctx.tenant)
    host = f.backend == "sqlite"
    rcs = {n: f.dir / f"{n}.faketime" for n in ("sched", "ahead", "behind", "jumpy", "host")}
    for n, offset in {"sched": "+0", "ahead": "+10m", "behind": "-10m", "jumpy": "+0", "host": "+0"}.items():
        _step(rcs[n], offset)
    if host:
        sched = [rcs["host"]]
        workers = {"w1": rcs["host"], "w2": rcs["host"]}
        steps = [[("host", "+10m")], []]
    else:
        sched = [rcs["sched"]]
        workers = {"ahead": rcs["ahead"], "behind": rcs["behind"], "jumpy": rcs["jumpy"]}
        steps = [[("sched", "+10m"), ("jumpy", "-10m")], [("sched", "-10m"), ("jumpy", "+10m")]]
    f.control(delay_ms=300)  # attempts last long enough to hold leases across the steps
    procs = [_faked(f, "s1", ["scheduler", "--poll-interval", "50ms"], sched[0], "scheduler running")]
    if not host:  # a second scheduler on the right clock: each decides against the other's leases
        procs.append(f.scheduler("s2"))
    procs += [_worker(f, name, rc) for name, rc in workers.items()]
    batch = max(1, ctx.runs // 3)
    t0 = time.monotonic()
    with ctx.monitor() as mon:
        start_runs(ctx, batch)
        for changes in steps:
            time.sleep(WAIT_S)  # timers armed before the step, leases held across it
            for name, offset in changes:
                _step(rcs[name], offset)
                ctx.count(f"clock of {name} stepped to {offset}")
            time.sleep(1.2)  # libfaketime re-reads its file every second
            start_runs(ctx, batch)
        settled = settle_time(ctx, t0)
    died = [p.name for p in procs if not p.alive()]
    v = ctx.verdict(monitor=mon)
    for name in died:
        v.flag("process_died", f"{name} exited under a faked clock")
    rows = f.sql("SELECT run_id, seq FROM events WHERE type = 'ActivityTimedOut'")
    timed_out = [f"run {r[0]} event {r[1]}: an attempt timed out with no worker stopped" for r in rows]
    ctx.count("attempts timed out (leases expired)", len(timed_out))
    for (data,) in f.sql("SELECT data FROM events WHERE type = 'ActivityStarted'"):
        ctx.count(f"attempts started by {json.loads(data).get('worker', '?')}")
    ignored = f.sql("SELECT count(*) FROM events WHERE type = 'ResultIgnored'")[0][0]
    ctx.count("late results rejected by fencing (ResultIgnored)", int(ignored))
    gaps = check_clocks(v, f.ledger.effects(), timed_out, WAIT_S, strict=not host)
    for what, value in gaps.items():
        ctx.injected[f"charge-to-ship {what} (wait {WAIT_S} s)"] = value
    return v, settled
