"""RunsTx in SQL: runs, their events (a hash chain) and snapshots. `append` is every command's write: the
events, the run row, and the outbox rows its effects imply, each written by the module of its aggregate
(tasks by work.py, timers by scheduler.py, approvals by approvals.py, notifications by notifications.py),
which is why this mixin builds on those."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, cast

from ...core.canonical import compact_json, parse_json
from ...core.effects import (
    CancelChild,
    CloseEventWait,
    CloseTask,
    CloseTimer,
    CreateTask,
    CreateTimer,
    DeadLetterTask,
    Effect,
    EmitWebhook,
    EndChild,
    LeaseTask,
    NotifyApprovers,
    OpenEventWait,
    StartChild,
    StoreCallback,
)
from ...core.events import Event, chain_link
from ...core.evolve import fold
from ...core.explain import wait_kind
from ...core.lanes import attempts
from ...core.sealed import maybe_sealed
from ...core.state import OutdatedSnapshot, RunState
from ..port import ConcurrencyError, CorruptRow, DamagedRun, LoadedRun
from .approvals import SqlApprovalsTx
from .base import GENESIS
from .children import SqlChildrenTx
from .events import SqlEventsTx
from .keys import SqlKeysTx
from .notifications import SqlNotificationsTx
from .scheduler import SqlSchedulerTx
from .webhooks import SqlWebhooksTx
from .work import SqlWorkTx

if TYPE_CHECKING:
    from ..port import Tx

__all__ = ["SqlRunsTx"]


class SqlRunsTx(
    SqlWorkTx,
    SqlSchedulerTx,
    SqlApprovalsTx,
    SqlNotificationsTx,
    SqlKeysTx,
    SqlChildrenTx,
    SqlEventsTx,
    SqlWebhooksTx,
):
    def load_run(self, run_id: str, *, skip_locked: bool = False) -> LoadedRun | None:
        """The run's snapshot. Backends with row locks lock it for this transaction; with `skip_locked`
        they raise RowLocked instead of waiting when another transaction holds it."""
        row = self._one("run_load", run_id=run_id)
        return self._loaded(run_id, row)

    def load_runs(self, run_ids: Sequence[str], *, skip_locked: bool = False) -> dict[str, LoadedRun]:
        """Several runs at once, locked in run-id order where the backend locks rows (no deadlock
        between two batches); missing ones (and, with `skip_locked`, ones another transaction holds)
        are absent from the answer."""
        out = {}
        for run_id in sorted(set(run_ids)):
            loaded = self.load_run(run_id)
            if loaded is not None:
                out[run_id] = loaded
        return self.with_keys(out)

    def with_keys(self, loaded: dict[str, LoadedRun]) -> dict[str, LoadedRun]:
        """`loaded`, after reading the key rows of its sealed runs in one query (see KeysTx)."""
        sealed = [run_id for run_id, run in loaded.items() if run.sealed]
        if sealed:
            self.remember_run_keys(sealed)
        return loaded

    def _loaded(self, run_id: str, row: Any) -> LoadedRun | None:
        """The run of a `run_load` row (tenant, snapshot, last hash, seq, damaged): a run the scrub
        marked damaged raises DamagedRun, so no command is decided on it."""
        loaded = self._decoded(run_id, row)
        if loaded is not None and row[4] is not None:
            raise DamagedRun(run_id, str(row[4]), loaded)
        return loaded

    def _decoded(self, run_id: str, row: Any) -> LoadedRun | None:
        if row is None:
            return None
        cached = self.states.get(run_id, row[2]) if self.states is not None else None
        if cached is not None:
            return LoadedRun(cached[0], row[2], stored=cached[1])
        try:
            raw = parse_json(row[1])
            stored = RunState.from_json(raw)
        except OutdatedSnapshot:
            # Written by an older lockstep: the events are the facts, so rebuild the snapshot from them.
            rebuilt = fold([e for e, _h in self.events(run_id)])
            if rebuilt is None:  # pragma: no cover - a run row always has its RunStarted event
                return None
            stored, raw = rebuilt, rebuilt.to_json(copy_values=False)
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptRow(run_id, None, _reason(exc)) from None
        if not maybe_sealed(row[1]):
            return LoadedRun(stored, row[2])
        return LoadedRun(None, row[2], stored=stored, opener=lambda: self._opened(stored, raw))

    def _opened(self, stored: RunState, raw: dict[str, Any]) -> RunState:
        """The clear state of a run whose snapshot (`raw`, as parsed) holds sealed values."""
        if self.sealer is None:
            raise RuntimeError(f"run {stored.run_id} holds sealed values and this store has no sealer")
        # This transaction is the whole Tx (SqlTx); the mixins alone do not say so to mypy.
        tx = cast("Tx", self)
        return RunState.from_json(self.sealer.open(tx, stored.tenant, stored.run_id, raw))

    def runs_to_scrub(self, after: str, limit: int) -> list[tuple[str, str]]:
        rows = self.c.execute(self.q["runs_to_scrub"], {"after": after, "limit": limit}).fetchall()
        return [(str(r[0]), str(r[1])) for r in rows]

    def mark_damaged(self, run_id: str, problem: str) -> bool:
        cur = self.c.execute(self.q["run_mark_damaged"], {"run_id": run_id, "damaged": problem})
        return bool(cur.rowcount == 1)

    def run_by_key(self, tenant: str, start_key: str) -> tuple[str, str | None] | None:
        row = self._one("run_by_key", tenant=tenant, start_key=start_key)
        return (row[0], row[1]) if row else None

    def runs_with_prefix(self, tenant: str, prefix: str, limit: int) -> list[str]:
        params = {"tenant": tenant, "low": prefix, "high": prefix + "g", "limit": limit}
        rows = self.c.execute(self.q["runs_with_prefix"], params).fetchall()
        return [str(r[0]) for r in rows]

    def append(
        self,
        before: LoadedRun | None,
        after: RunState,
        events: Sequence[Event],
        effects: Sequence[Effect],
        *,
        now_ms: int,
        request_digest: str | None = None,
        lease_until_ms: int | None = None,
        clear: RunState | None = None,
    ) -> None:
        expected = before.stored.seq if before else 0
        h = before.last_hash if before else GENESIS
        rows = []
        for i, e in enumerate(events):
            if e.seq != expected + i + 1:
                raise ConcurrencyError(f"event seq {e.seq} does not follow {expected + i}")
            doc = e.to_json()
            h = chain_link(h, after.run_id, doc)
            rows.append(
                {
                    "run_id": after.run_id,
                    "seq": e.seq,
                    "type": e.type,
                    "at": e.at,
                    "v": e.v,
                    "data": compact_json(doc["data"]),
                    "hash": h,
                }
            )
        row = {
            "run_id": after.run_id,
            "status": after.status,
            "seq": after.seq,
            "current_step": after.current_step,
            "snapshot": after.snapshot_text(),
            "last_hash": h,
            "updated_at": after.updated_at,
            "wait_kind": wait_kind(after),  # what /metrics counts runs by (lockstep_runs_at_step)
        }
        try:
            # One round trip on PostgreSQL (a pipeline): none of these writes needs an answer before
            # the next, and the run update's row count is read once they are all through (inside a
            # batch(), once the whole batch is).
            with nullcontext() if self._deferred is not None else self.pipeline():
                for event_row in rows:
                    self._write("event_insert", event_row)
                cur = None
                if before is None:
                    cur = self.c.execute(
                        self.q["run_insert"],
                        {
                            **row,
                            "tenant": after.tenant,
                            "definition": after.definition["name"],
                            "version": after.definition["version"],
                            "start_key": after.start_key,
                            "request_digest": request_digest,
                            "created_at": after.started_at,
                        },
                    )
                elif self._pending is not None:
                    self._pending.append(("run_update", {**row, "expected_seq": expected}))
                else:
                    cur = self.c.execute(self.q["run_update"], {**row, "expected_seq": expected})
                self._write_effects(after, effects, now_ms, lease_until_ms)
                self.hint(effects)
        except self.integrity_error:
            # A unique key said no: another writer appended these seqs, or took the start key.
            raise ConcurrencyError(
                f"run {after.run_id} was changed by another writer (seq {expected})"
            ) from None
        if cur is None:
            pass  # a buffered run update: checked with its batch
        elif self._deferred is not None:
            self._deferred.append((cur, 1, f"run {after.run_id} (seq {expected})"))
        elif cur.rowcount != 1:
            raise ConcurrencyError(f"run {after.run_id} moved past seq {expected}")
        leased = after.active is not None and after.active.worker is not None
        if not leased and after.lanes:  # a parallel or for-each step: any lane's attempt
            leased = any(a.worker is not None for a in attempts(after))
        if self.states is not None and leased:
            # An attempt is out: its result (this process's or another's) is the run's next command.
            # Runs that wait for days are not kept; the entry is used only while the head is still h.
            self.states.put(after.run_id, h, clear or after, after)
        elif self.states is not None and clear is not None:
            self.states.forget(after.run_id)  # clear values are kept no longer than they are needed

    def _write_effects(
        self, run: RunState, effects: Sequence[Effect], now_ms: int, lease_until_ms: int | None
    ) -> None:
        """The outbox rows of an append, in the order of its effects, each by its aggregate's module."""
        leases = {fx.task_id: fx for fx in effects if isinstance(fx, LeaseTask)}
        created = {fx.task_id for fx in effects if isinstance(fx, CreateTask)}
        for fx in effects:
            if isinstance(fx, (CreateTask, LeaseTask, DeadLetterTask, CloseTask)):
                self._write_task_effect(run, fx, leases, created, now_ms, lease_until_ms)
            elif isinstance(fx, (CreateTimer, CloseTimer)):
                self._write_timer_effect(run, fx)
            elif isinstance(fx, NotifyApprovers):
                self._write_notification(run, fx, now_ms)
            elif isinstance(fx, (StartChild, CancelChild, EndChild)):
                self._write_child_effect(run, fx, now_ms)
            elif isinstance(fx, (OpenEventWait, CloseEventWait, StoreCallback)):
                self._write_event_effect(run, fx, now_ms)
            elif isinstance(fx, EmitWebhook):
                self._write_webhook_effect(run, fx, now_ms)
            else:
                self._write_approval_effect(run, fx)

    def runs(
        self,
        tenant: str,
        *,
        status: str | None,
        definition: str | None,
        after: str,
        limit: int,
        before: str | None = None,
    ) -> list[RunState]:
        """Ascending after `after`, or (with `before`) descending, newest first, below `before`."""
        params = {"tenant": tenant, "status": status, "definition": definition, "limit": limit}
        if before is not None:
            rows = self.c.execute(self.q["runs_list_desc"], {**params, "before": before or "~"}).fetchall()
        else:
            rows = self.c.execute(self.q["runs_list"], {**params, "after": after}).fetchall()
        return [self._state_of(r[0]) for r in rows]

    def _state_of(self, snapshot: str) -> RunState:
        raw = parse_json(snapshot)
        try:
            return RunState.from_json(raw)
        except OutdatedSnapshot:
            state = fold([e for e, _h in self.events(raw["run_id"])])
            if state is None:  # pragma: no cover
                raise
            return state

    def run_ids(self, tenant: str | None) -> list[str]:
        return [r[0] for r in self.c.execute(self.q["runs_all_ids"], {"tenant": tenant})]

    def events(self, run_id: str) -> list[tuple[Event, str]]:
        rows = self.c.execute(self.q["events_of_run"], {"run_id": run_id}).fetchall()
        out = []
        for r in rows:
            try:
                out.append((Event.from_row(r[0], r[1], r[2], r[3], r[4]), r[5]))
            except (ValueError, KeyError, TypeError) as exc:
                raise CorruptRow(run_id, r[0], _reason(exc)) from None
        return out

    def active_runs(self, tenant: str) -> int:
        return int(self._one("active_runs_count", tenant=tenant)[0])


def _reason(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no detail'}"[:200]
