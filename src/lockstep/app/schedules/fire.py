"""The scheduler's schedule pass: fire the slots that are due, like timers.

A pass takes the due schedules in one write transaction (on PostgreSQL: only this scheduler's
partitions, each row locked with SKIP LOCKED, so two schedulers never work on one schedule) and deals
with each in a savepoint: the core's `step` says which slot to start and which due slots are missed (the
catch-up policy), the overlap policy may skip the slot or cancel the previous run, and the run's start
(start key `<schedule>:<slot>`), the cancel, the record of the slot and the schedule's advance (written
only over the generation it was read at) commit together or not at all. A crash before the commit
leaves the slot due (the next pass starts it); after it, the schedule has moved on. A slot whose start
key already names a run is never started again, whatever happened before.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime

from ...core.canonical import JSONValue
from ...core.commands import CancelRun, Rejected
from ...core.schedule import Missed, ScheduleError, parse_cron, slot_key, step
from ...core.state import TERMINAL
from ...core.timeutil import iso
from ...errors import LockstepError, Unavailable
from ...store import ConcurrencyError, LoadedRun, ScheduleRow, ScheduleTx, SlotRow
from .. import failpoints
from ..audit import Audit
from ..kernel import epoch_ms
from ..port import KernelPort
from ..runs import Runs
from .inputs import InputSeal
from .manage import KEEP_SLOTS, actor_of
from .rules import at

__all__ = ["Firing"]

log = logging.getLogger("lockstep.schedules")
# Passes per call while slots are still due (catch-up `all` starts one slot per schedule and pass).
ROUNDS = 20
# Refusals that are this process's configuration, not the slot's: the slot stays due for a scheduler
# that has the key (or for this one, once it has).
_CONFIG = {"no_key", "wrong_key"}


@dataclass(frozen=True)
class Outcome:
    """What became of a slot, and the schedule's input as it is to be stored (sealed anew if needed)."""

    outcome: str
    run_id: str | None
    reason: str | None
    stored: JSONValue


class Firing:
    def __init__(self, kernel: KernelPort[ScheduleTx], runs: Runs, seal: InputSeal) -> None:
        self.kernel = kernel
        self.runs = runs
        self.seal = seal
        self.audit = Audit(kernel)

    def fire_due(self, limit: int = 200, partitions: list[int] | None = None) -> int:
        """Deal with every due slot of the due schedules (of `partitions`; None: all): how many
        schedules moved on."""
        total = 0
        for _ in range(ROUNDS):
            done = self._round(limit, partitions)
            total += done
            if done == 0:
                break
        return total

    def _round(self, limit: int, partitions: list[int] | None) -> int:
        now = self.kernel.clock()
        with self.kernel.write() as tx:
            due = tx.due_schedules(epoch_ms(now), limit, partitions)
            moved = [
                r.name
                for r in due
                if self.kernel.isolated(tx, f"schedule {r.name} of tenant {r.tenant}", self._one, r, now)
            ]
        if moved:
            failpoints.hit("schedule.committed", schedules=len(moved))
        return len(moved)

    def _one(self, tx: ScheduleTx, row: ScheduleRow, now: datetime) -> bool:
        now_ms = epoch_ms(now)
        try:
            cron = parse_cron(row.cron, row.timezone)
        except ScheduleError as exc:  # e.g. a zone gone from the tz database: stop, say why
            return self._pause(tx, row, now, f"its schedule can no longer be read: {exc}")
        plan = step(cron, row.next_at, now_ms, row.catch_up, row.catch_up_limit)  # type: ignore[arg-type]
        if plan is None:
            return False
        stamp = iso(now)
        updated = replace(row, next_at=plan.next_at, generation=row.generation + 1)
        if plan.missed is not None:
            tx.add_slot(row.id, _missed(plan.missed, stamp), KEEP_SLOTS)
            updated = replace(updated, slots_missed=updated.slots_missed + (plan.missed.count or 1))
        if plan.fire is not None:
            out = self._slot(tx, row, plan.fire, now)
            slot = SlotRow(plan.fire, out.outcome, out.run_id, out.reason, recorded_at=stamp)
            tx.add_slot(row.id, slot, KEEP_SLOTS)
            updated = replace(updated, input=out.stored)
            if out.outcome == "started":
                updated = replace(
                    updated, last_slot=plan.fire, last_run=out.run_id, runs_started=updated.runs_started + 1
                )
            elif out.outcome == "skipped":
                updated = replace(updated, slots_skipped=updated.slots_skipped + 1)
        if failpoints.enabled("unsafe.schedule_no_advance", schedule=row.name):
            updated = replace(updated, next_at=row.next_at)  # the broken build: the slot stays due
        if not tx.update_schedule(updated, row.generation):
            raise ConcurrencyError(f"schedule {row.name} changed while its slot fired; the next pass retries")
        failpoints.hit("schedule.advanced", schedule=row.name, slot=plan.fire, tenant=row.tenant)
        return True

    def _slot(self, tx: ScheduleTx, row: ScheduleRow, slot: int, now: datetime) -> Outcome:
        """Start the run of one slot."""
        key = slot_key(row.name, slot)
        if failpoints.enabled("unsafe.schedule_no_advance", schedule=row.name):
            key += f"#{row.generation}"  # ... and its start key no longer names the slot alone
        found = tx.run_by_key(row.tenant, key)
        if found is not None:
            why = f"run {found[0]} was started with start key {key} before"
            return Outcome("already_started", found[0], why, row.input)
        previous = self._unfinished_previous(tx, row)
        if previous is not None and row.overlap == "skip":
            why = (
                f"run {previous.state.run_id} of an earlier slot is still {previous.state.status} "
                "(overlap skip: no new run while it is unfinished)"
            )
            return Outcome("skipped", None, why, row.input)
        stored = row.input
        try:
            # Sealed outside the start's savepoint: a refused start must not take the new key row along.
            stored, clear = self.seal.for_start(tx, row)
            with tx.savepoint():
                run_id = self.runs.start_in(
                    tx,
                    now,
                    row.tenant,
                    row.definition,
                    input=clear,
                    key=key,
                    version=row.version,
                    actor=actor_of(row.name),
                )
        except Rejected as r:
            return Outcome("refused", None, r.reason, stored)
        except LockstepError as exc:
            if exc.code in _CONFIG or isinstance(exc, Unavailable):
                raise
            return Outcome("refused", None, str(exc), stored)
        failpoints.hit("schedule.started", schedule=row.name, slot=slot, run=run_id, tenant=row.tenant)
        if previous is not None and row.overlap == "cancel_previous":
            self._cancel(tx, row, previous, slot, run_id, now)
        return Outcome("started", run_id, None, stored)

    def _unfinished_previous(self, tx: ScheduleTx, row: ScheduleRow) -> LoadedRun | None:
        """The schedule's last run, locked, while it is unfinished (overlap skip and cancel_previous)."""
        if row.last_run is None or row.overlap == "allow":
            return None
        loaded = tx.load_run(row.last_run)
        if loaded is None or loaded.state.status in TERMINAL:
            return None
        return loaded

    def _cancel(
        self, tx: ScheduleTx, row: ScheduleRow, loaded: LoadedRun, slot: int, new: str, now: datetime
    ) -> None:
        run_id = loaded.state.run_id
        reason = (
            f"schedule {row.name}: slot {at(slot)} started run {new} while this run was still "
            f"{loaded.state.status} (overlap cancel_previous)"
        )
        d = self.kernel.definition_of(tx, loaded.state)
        try:
            self.kernel.apply(tx, loaded, CancelRun(reason, actor_of(row.name)), now, d)
        except Rejected as r:  # it finished or is being cancelled already: nothing to do
            log.info("schedule %s: run %s was not cancelled: %s", row.name, run_id, r.reason)
            return
        self.audit.record(row.tenant, actor_of(row.name), "run.cancel", run_id, "ok", tx=tx, reason=reason)

    def _pause(self, tx: ScheduleTx, row: ScheduleRow, now: datetime, why: str) -> bool:
        stamp = iso(now)
        tx.add_slot(row.id, SlotRow(row.next_at, "refused", None, why, recorded_at=stamp), KEEP_SLOTS)
        paused = replace(
            row,
            status="paused",
            paused_reason=why,
            generation=row.generation + 1,
            updated_at=stamp,
            paused_at=stamp,
            paused_by=None,  # the scheduler itself
        )
        if not tx.update_schedule(paused, row.generation):
            raise ConcurrencyError(f"schedule {row.name} changed meanwhile")
        self.audit.record(row.tenant, None, "schedule.pause", row.name, "ok", tx=tx, reason=why)
        return True


def _missed(m: Missed, stamp: str) -> SlotRow:
    return SlotRow(m.first, "missed", None, m.reason, until_at=m.last, count=m.count, recorded_at=stamp)
