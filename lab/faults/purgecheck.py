"""What the checker adds for retention (`purge_under_load`): a watcher that records, from raw SQL, when
each run was last seen unfinished and how it was first seen finished, and the checks over the tombstones
and the rows left once the scenario settled. It trusts the engine for nothing but its stored rows: a
run's end comes from the watcher's samples and its terminal event, a hold from the driver's own record.

Violations (each must be 0):
- runs_lost: a run the driver started is neither stored nor tombstoned;
- purged_unfinished: a tombstoned run the watcher never saw finished (or one that could not finish);
- purged_held: a tombstoned run under a hold (its own, never released, or its tenant's), or one purged
  before its hold was released;
- purged_early: purged less than the retention after the watcher last saw it unfinished;
- kept_past_retention: a finished run still stored although its retention (or the release of its hold)
  plus one purge period plus the allowance for a killed scheduler's restart has passed;
- purge_incomplete: a tombstone still 'purging' after the scenario settled, or rows of a tombstoned run
  left in any table;
- tombstone_mismatch: a tombstone whose status, event count or chain head is not what the watcher last
  saw of the finished run.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from lockstep.core.state import TERMINAL
from lockstep.core.timeutil import parse_iso

from .checker import PURGE_CHECKS, Verdict
from .faultfleet import FaultFleet

__all__ = ["PURGE_CHECKS", "PurgeWatch", "Tracked", "check_purge"]

RUN_TABLES = ("runs", "events", "tasks", "timers", "approval_requests", "approval_links", "notifications")


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
    for table in RUN_TABLES:
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
    if keep is not None and seen.unfinished_at is not None and purged < seen.unfinished_at + keep - 0.05:
        v.flag("purged_early", f"{run_id}: purged {seen.unfinished_at + keep - purged:.2f}s early")
    if keep is not None and not t.held:  # how long after it fell due (a held run fell due at its release)
        late.append(purged - (parse_iso(str(finished_at)).timestamp() + keep))
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
