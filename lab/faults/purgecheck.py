"""What the checker adds for retention (`purge_under_load`): a watcher that records, from raw SQL, when
each run was last seen unfinished and how it was first seen finished, and the checks over the tombstones
and the rows left once the scenario settled. It trusts the engine for nothing but its stored rows: a
run's end comes from the watcher's samples and its terminal event, a hold from the driver's own record.

Violations (each must be 0):
- runs_lost: a run the driver started is neither stored nor tombstoned;
- purged_unfinished: a tombstoned run the watcher never saw finished (or one that could not finish);
- purged_held: a tombstoned run under a hold (its own, never released, or its tenant's), or one purged
  before its hold was released;
- purged_early: purged less than the retention after its tombstone's end (the terminal event's time), or
  after the watcher last saw it unfinished (less the time a commit may take on a loaded machine);
- kept_past_retention: a finished run still stored although its retention (or the release of its hold)
  plus one purge period plus the allowance for a killed scheduler's restart has passed;
- purge_incomplete: a tombstone still 'purging' after the scenario settled, or rows of a tombstoned run
  left in any table;
- tombstone_mismatch: a tombstone whose status, event count or chain head is not what the watcher last
  saw of the finished run;
- sealed_left: a purged run's key row still stored, or one of its sealed values (the ciphertext the
  watcher read from the run's rows once it finished) still found in any column of any table;
- transactions_failed: a scheduler's purge or re-wrap pass that deadlocked or failed for anything but a
  lost race (lost races are retried and only counted), or a lockstep process that died without one of
  the scenario's fail points killing it.

The tables are read from the database's catalog (every table with a `run_id` column holds rows of a
run), not from a list of the engine's, so a table added later is checked too.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from lockstep.core.state import TERMINAL
from lockstep.core.timeutil import parse_iso

from ..fleet import Proc
from .checker import PURGE_CHECKS, Verdict
from .faultfleet import FaultFleet

__all__ = ["PURGE_CHECKS", "PurgeWatch", "Tracked", "check_processes", "check_purge", "check_sealed"]

# The payload of a sealed value as stored (core/sealed.py): base64url of nonce, ciphertext and tag.
MARKER = re.compile(r'"\$sealed"\s*:\s*"ls1\.[^".]*\.([A-Za-z0-9_-]{16,})"')
# What a scheduler logs when a pass failed (runtime/scheduler.py, app/kernel.py's isolated items).
LOST_RACE = ("pass failed:", "report/claim failed:", " in this pass")
BROKEN = ("deadlock detected", "failed unexpectedly", "not re-wrapped")
# Timestamps are stored to the millisecond.
STAMP_S = 0.002
# A run's terminal event is stamped inside its transaction, before the commit the watcher can see: on a
# loaded machine (a report waiting for a row lock) the watcher still sees the run unfinished a while
# after that stamp. A purge that ignored the retention would be early by most of it (seconds).
COMMIT_S = 0.5


def tables(fleet: FaultFleet) -> dict[str, list[str]]:
    """Every table of the database and its columns, from the catalog."""
    if fleet.backend == "sqlite":
        names = fleet.sql("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        return {str(n): [str(c[1]) for c in fleet.sql(f'PRAGMA table_info("{n}")')] for (n,) in names}
    out: dict[str, list[str]] = {}
    for table, column in fleet.sql(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema()"
        " ORDER BY table_name, ordinal_position"
    ):
        out.setdefault(str(table), []).append(str(column))
    return out


def run_tables(catalog: dict[str, list[str]]) -> list[str]:
    """The tables holding rows of a run (a `run_id` column), but the tombstones that outlive it."""
    return sorted(t for t, cols in catalog.items() if "run_id" in cols and t != "tombstones")


def _text(row: Iterable[Any]) -> str:
    # str() of every value: a payload is ASCII, so even a bytes value's repr holds it as stored.
    return "\x1f".join(str(v) for v in row)


@dataclass
class Tracked:
    """What the driver knows of a run it started: its tenant, whether it can finish, its hold."""

    tenant: str
    can_finish: bool = True
    held: bool = False
    released_at: float | None = None  # wall-clock seconds, once the release had committed
    release_began: float | None = None  # wall-clock seconds, before the release was sent


@dataclass
class Seen:
    unfinished_at: float | None = None  # the last sample that showed it unfinished
    finished: tuple[str, int, str] | None = None  # (status, seq, last hash) last seen finished
    finished_at: float | None = None  # the first sample that showed it finished


@dataclass
class PurgeWatch:
    """Samples every run row (raw SQL, its own connection) every `interval` seconds while it runs."""

    fleet: FaultFleet
    interval: float = 0.1
    seen: dict[str, Seen] = field(default_factory=dict)
    samples: int = 0
    # The sealed payloads in a run's rows, read once it was first seen finished (before any purge).
    sealed: dict[str, set[str]] = field(default_factory=dict)
    catalog: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="faults-purge-watch", daemon=True)

    def __enter__(self) -> PurgeWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.sample()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        at = time.time()
        try:
            rows = self.fleet.sql("SELECT run_id, status, seq, last_hash FROM runs")
        except Exception:
            return
        self.samples += 1
        for run_id, status, seq, last_hash in rows:
            s = self.seen.setdefault(str(run_id), Seen())
            if status in TERMINAL:  # the latest finished state (a late stale report may follow the end)
                s.finished = (str(status), int(seq), str(last_hash))
                s.finished_at = s.finished_at or at
            else:
                s.unfinished_at = at
        todo = [r for r, s in self.seen.items() if s.finished is not None and r not in self.sealed]
        if todo:
            try:
                self.sealed |= self._read_sealed(todo)
            except Exception:  # a busy database: the next sample reads them
                return

    def _read_sealed(self, run_ids: list[str]) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {r: set() for r in run_ids}
        marks = ", ".join("?" for _ in run_ids)
        catalog = self.catalog = self.catalog or tables(self.fleet)
        for table in run_tables(catalog):
            at = catalog[table].index("run_id")
            for row in self.fleet.sql(f"SELECT * FROM {table} WHERE run_id IN ({marks})", tuple(run_ids)):
                found[str(row[at])].update(MARKER.findall(_text(row)))
        return found


def check_purge(
    fleet: FaultFleet,
    tracked: dict[str, Tracked],
    watch: PurgeWatch,
    retention_s: dict[str, float],
    *,
    period_s: float,
    allowance_s: float,
    held_tenants: set[str],
    v: Verdict,
) -> dict[str, Any]:
    """Flag the purge violations in `v`; returns numbers for the report (purged, kept, lateness)."""
    now = time.time()
    stored = {str(r[0]) for r in fleet.sql("SELECT run_id FROM runs")}
    cols = "run_id, tenant, status, events, last_hash, finished_at, purged_at, state"
    stones = {str(r[0]): r for r in fleet.sql(f"SELECT {cols} FROM tombstones")}
    left: dict[str, int] = {}
    for table in run_tables(tables(fleet)):
        if table == "run_keys":  # a key left behind is sealed_left's (check_sealed)
            continue
        for run_id, n in fleet.sql(
            f"SELECT run_id, COUNT(*) FROM {table} WHERE run_id IN (SELECT run_id FROM tombstones) "
            "GROUP BY run_id"
        ):
            left[str(run_id)] = left.get(str(run_id), 0) + int(n)
    late: list[float] = []
    for run_id, t in tracked.items():
        seen = watch.seen.get(run_id, Seen())
        keep = retention_s.get(t.tenant)
        if run_id in stones:
            _tombstoned(run_id, t, seen, stones[run_id], keep, held_tenants, left, late, v)
        elif run_id not in stored:
            v.flag("runs_lost", f"{run_id}: neither stored nor tombstoned")
        elif keep is not None and t.tenant not in held_tenants and not (t.held and t.released_at is None):
            end = _terminal_time(fleet, run_id)
            if end is not None:
                due = max(end + keep, t.released_at or 0.0)
                if now > due + period_s + allowance_s:
                    v.flag("kept_past_retention", f"{run_id}: due {now - due:.1f}s ago, still stored")
    return {
        "purged": sum(1 for r in tracked if r in stones),
        "kept": sum(1 for r in tracked if r in stored),
        "purge lateness max s": round(max(late), 2) if late else None,
        "watch samples": watch.samples,
    }


def _tombstoned(
    run_id: str,
    t: Tracked,
    seen: Seen,
    stone: Any,
    keep: float | None,
    held_tenants: set[str],
    left: dict[str, int],
    late: list[float],
    v: Verdict,
) -> None:
    _rid, _tenant, status, events, last_hash, finished_at, purged_at, state = stone
    purged = parse_iso(str(purged_at)).timestamp()
    if not t.can_finish or seen.finished is None:
        v.flag("purged_unfinished", f"{run_id}: purged, never seen finished")
    released = t.release_began if t.release_began is not None else t.released_at
    if t.tenant in held_tenants or (t.held and (released is None or purged < released)):
        v.flag("purged_held", f"{run_id}: purged under a legal hold")
    finished = parse_iso(str(finished_at)).timestamp()
    watched = seen.unfinished_at
    if keep is not None and purged < finished + keep - STAMP_S:
        v.flag("purged_early", f"{run_id}: purged {finished + keep - purged:.2f}s before its end + retention")
    elif keep is not None and watched is not None and purged < watched + keep - COMMIT_S:
        v.flag("purged_early", f"{run_id}: purged {watched + keep - purged:.2f}s early (watcher)")
    if keep is not None and not t.held:  # how long after it fell due (a held run fell due at its release)
        late.append(purged - (finished + keep))
    if state != "purged" or left.get(run_id):
        v.flag("purge_incomplete", f"{run_id}: tombstone {state}, {left.get(run_id, 0)} rows left")
    if seen.finished is not None and seen.finished != (str(status), int(events), str(last_hash)):
        v.flag("tombstone_mismatch", f"{run_id}: tombstone {status}/{events} vs seen {seen.finished[:2]}")


def _terminal_time(fleet: FaultFleet, run_id: str) -> float | None:
    """When the run's terminal event was recorded (None: it has not finished)."""
    rows = fleet.sql(
        "SELECT at FROM events WHERE run_id = ? AND type IN ('RunCompleted', 'RunFailed', 'RunCancelled')",
        (run_id,),
    )
    return parse_iso(str(rows[0][0])).timestamp() if rows else None


def check_sealed(
    fleet: FaultFleet, tracked: dict[str, Tracked], watch: PurgeWatch, v: Verdict
) -> dict[str, int]:
    """Flag sealed_left: a tombstoned run whose key row is still stored, or one of whose sealed values
    (as the watcher read them) is still found anywhere in the database; numbers for the report."""
    purged = {str(r[0]) for r in fleet.sql("SELECT run_id FROM tombstones")} & set(tracked)
    keys = {str(r[0]) for r in fleet.sql("SELECT run_id FROM run_keys")}
    stored = {
        table: "\n".join(_text(r) for r in fleet.sql(f"SELECT * FROM {table}")) for table in tables(fleet)
    }
    payloads = 0
    for run_id in sorted(purged):
        if run_id in keys:
            v.flag("sealed_left", f"{run_id}: purged, its run key row is still stored")
        sealed = watch.sealed.get(run_id)
        if not sealed:  # every run of the scenario seals its input: nothing read means nothing checked
            v.flag("sealed_left", f"{run_id}: purged before the watcher read its sealed values (unchecked)")
            continue
        payloads += len(sealed)
        for table, text in stored.items():
            hits = sum(1 for p in sealed if p in text)
            if hits:
                v.flag("sealed_left", f"{run_id}: purged, {hits} of its sealed values still in table {table}")
    return {"purged runs scanned for sealed values": len(purged), "sealed values of purged runs": payloads}


def check_processes(procs: list[Proc], killed: set[int], v: Verdict) -> dict[str, int]:
    """What the processes said and how they ended: passes that lost a race and were retried are counted;
    a deadlock, an unexpected failure, or a death no fail point caused is flagged transactions_failed."""
    retried = 0
    for proc in procs:
        for line in proc.log().splitlines():
            if any(b in line for b in BROKEN):
                v.flag("transactions_failed", f"{proc.name}: {line.strip()[:300]}")
            elif any(r in line for r in LOST_RACE):
                retried += 1
        if not proc.alive() and proc.pid not in killed:
            v.flag("transactions_failed", f"{proc.name} (pid {proc.pid}) died without a fail point")
    return {"passes retried (lost race)": retried}
