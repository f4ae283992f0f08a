"""The scheduler's children pass: the outbox between a parent run's `run` step and its child.

A parent and its child are different runs, so no command changes both. Each row moves on by one command
on one side, in a savepoint of the pass's transaction, marked in that same savepoint (so a crash
anywhere leaves the row where it was, and the next pass does it again: idempotently):

- requested: start the child (in the parent's tenant: the row has no other; a definition of that tenant
  only), its id and start key chosen by the parent, so a start done twice finds the run it started; a
  child that cannot start (no such definition, an input its schema refuses, too deep) ends failed at
  once; a start over the tenant's quota is tried again later;
- ended (the child's terminal event wrote its end): hand it to the parent as ChildEnded;
- started with a cancel asked by the parent: send the child CancelRun, once (it then ends, as above).
"""

from __future__ import annotations

import contextlib
import logging
from datetime import datetime
from typing import Any

from ..core.commands import CancelRun, ChildEnded, Rejected
from ..core.limits import tenant_limit
from ..core.sealed import contains_marker
from ..errors import LockstepError, RateLimited
from ..store import ChildRow, ChildTx, LoadedRun, RowLocked
from .kernel import epoch_ms, lock_run
from .port import KernelPort
from .runs import Runs
from .tracing import SpanRef, run_trace

__all__ = ["Children"]

log = logging.getLogger("lockstep.app.children")
RETRY_MS = 1000  # a start refused by the tenant's quota is tried again after (doubling, at most 64 s)


class Children:
    def __init__(self, kernel: KernelPort[ChildTx], runs: Runs) -> None:
        self.kernel = kernel
        self.runs = runs

    def run_children(self, limit: int = 100) -> int:
        """One pass over the rows due; returns how many moved on."""
        now = self.kernel.clock()
        with self.kernel.write() as tx:
            rows = tx.due_children(epoch_ms(now), limit)
            done = 0
            for row in rows:
                what = f"child run {row['child_run_id']} of run {row['run_id']}"
                done += bool(self.kernel.isolated(tx, what, self._one, row, now))
        return done

    def _one(self, tx: ChildTx, row: ChildRow, now: datetime) -> bool:
        if row["status"] == "requested":
            return self._start(tx, row, now)
        if row["status"] == "ended":
            return self._report(tx, row, now)
        return self._cancel(tx, row, now)

    def _ended(self, tx: ChildTx, row: ChildRow, now: datetime, status: str, code: str, message: str) -> bool:
        result = {"output": None, "error": {"code": code, "message": message}}
        tx.mark_child(row["child_run_id"], "ended", epoch_ms(now), child_status=status, result=result)
        return True

    def _start(self, tx: ChildTx, row: ChildRow, now: datetime) -> bool:
        tenant, child = row["tenant"], row["child_run_id"]
        if row["cancel_reason"] is not None:
            return self._ended(tx, row, now, "cancelled", "Cancelled", "cancelled before it started")
        most = tenant_limit(self.kernel.settings_of(tenant, tx), "max_child_depth")
        if row["depth"] > most:
            why = f"a child run {row['depth']} levels deep; the tenant allows {most} (max_child_depth)"
            return self._ended(tx, row, now, "failed", "ChildDepthExceeded", why)
        if tx.run_by_key(tenant, row["start_key"]) is not None:  # started before, this row not marked
            tx.mark_child(child, "started", epoch_ms(now))
            return True
        payload = row["input"]
        if isinstance(payload, dict | list) and contains_marker(payload):
            payload = self.kernel.opened(tx, tenant, row["run_id"], payload)  # the parent's sealed values
        parent = {"run_id": row["run_id"], "step": row["step"], "depth": row["depth"]}
        try:
            with tx.savepoint():
                # Marked first: a child that ends in its start (a succeed step) writes its end over it.
                tx.mark_child(child, "started", epoch_ms(now))
                self.runs.start_child(
                    tx,
                    now,
                    tenant,
                    row["definition"],
                    row["version"],
                    payload,
                    row["start_key"],
                    child,
                    parent,
                    self._span_of(tx, row),
                )
        except RateLimited as exc:
            wait = min(RETRY_MS * 2 ** min(row["attempts"], 6), 64_000)
            at = epoch_ms(now) + wait
            tx.mark_child(child, "requested", epoch_ms(now), available_at=at, error=str(exc), tried=True)
            return False
        except (LockstepError, Rejected) as exc:
            message = exc.reason if isinstance(exc, Rejected) else str(exc)
            return self._ended(tx, row, now, "failed", "ChildNotStarted", message[:2000])
        return True

    def _span_of(self, tx: ChildTx, row: ChildRow) -> SpanRef | None:
        """The parent's step span: the child's trace is a part of the parent's."""
        try:
            loaded = tx.load_run(row["run_id"], skip_locked=True)
        except RowLocked:  # the parent is being changed: the child starts a trace of its own
            return None
        if loaded is None:
            return None
        st = loaded.stored.steps.get(row["step"])
        if st is None or st.entered_seq is None:
            return None
        trace = run_trace(loaded.stored)
        return trace.ref(trace.span("step", st.entered_seq))

    def _report(self, tx: ChildTx, row: ChildRow, now: datetime) -> bool:
        loaded = lock_run(tx, row["run_id"])
        if loaded is False:
            return False  # the parent is being changed: the next pass
        if loaded is not None:
            self._tell_parent(tx, loaded, row, now)
        tx.mark_child(row["child_run_id"], "reported", epoch_ms(now))
        return True

    def _tell_parent(self, tx: ChildTx, loaded: LoadedRun, row: ChildRow, now: datetime) -> None:
        result: Any = row["result"] or {}
        if contains_marker(result):  # the child's sealed output: opened with its key, sealed again by
            result = self.kernel.opened(tx, row["tenant"], row["child_run_id"], result)  # the parent's
        cmd = ChildEnded(
            row["child_run_id"],
            row["step"],
            row["child_status"] or "failed",
            result.get("output"),
            result.get("error"),
        )
        d = self.kernel.definition_of(tx, loaded.state)
        try:
            self.kernel.apply(tx, loaded, cmd, now, d)
        except Rejected as r:  # the parent moved on (or ended): the end is of no use to it any more
            log.info("child run %s: its parent %s refused its end: %s", row["child_run_id"], row["run_id"], r)

    def _cancel(self, tx: ChildTx, row: ChildRow, now: datetime) -> bool:
        loaded = lock_run(tx, row["child_run_id"])
        if loaded is False:
            return False
        if loaded is not None:
            reason = f"its parent run {row['run_id']} is cancelled ({row['cancel_reason']})"
            d = self.kernel.definition_of(tx, loaded.state)
            # Already finished or cancelling: its end reaches the parent all the same.
            with contextlib.suppress(Rejected):
                self.kernel.apply(tx, loaded, CancelRun(reason, "lockstep"), now, d)
        tx.mark_child_cancel_sent(row["child_run_id"], epoch_ms(now))
        return True
