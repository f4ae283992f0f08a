"""The test lab's one process harness: real `lockstep` worker / scheduler / serve processes (and any other
program a driver needs) on one database, each a subprocess with its output in a log file, that the
driver can SIGKILL, SIGSTOP and SIGCONT; raw SQL past the engine; a ledger for a test's downstream;
throwaway PostgreSQL databases (`lockstep.testing.PgCluster`). `Fleet.shutdown()` kills and reaps them
all.

Its users keep their specifics to themselves and subclass `Fleet` for them: the fault suite
(`lab/faults/faultfleet.py`: the downstream payment API, fail points), the benchmark
(`lab/bench/fleet_side.py`), the crash tests (`tests/runtime/prockit.py`) and the scale tests
(`tests/scale/scalekit.py`), each with its own activity module and default options.

Synchronisation is `wait_until` (poll with a deadline); a fixed sleep only ever stands for "let time
pass" (a lease running out), never for "until something happened".

The modules: processes.py (`Proc`, `Fleet`, `stop_quiescent`, `free_port`), databases.py (`sql`,
`database`, `postgres`, `Ledger`, `quiescent`), waiting.py (`wait_until`). Import from here: `from
lab.fleet import Fleet, wait_until`. otlp.py (`otlp_receiver`: a real OTLP/HTTP trace receiver on
loopback) is imported on its own, `from lab.fleet.otlp import otlp_receiver`: it needs
opentelemetry-proto (the dev extra).
"""

from __future__ import annotations

from .databases import Ledger, database, postgres, quiescent, sql, sqlite_path
from .processes import Fleet, Proc, free_port, stop_quiescent
from .waiting import wait_until

__all__ = [
    "Fleet",
    "Ledger",
    "Proc",
    "database",
    "free_port",
    "postgres",
    "quiescent",
    "sql",
    "sqlite_path",
    "stop_quiescent",
    "wait_until",
]
