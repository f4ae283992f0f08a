"""What every SQL aggregate module builds on: the connection, the named queries, buffered writes and
batches, savepoints, and the few places a backend differs (pipelines, wake-up hints, list parameters)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from ...core.effects import CancelChild, CreateTask, CreateTimer, Effect, EndChild, LeaseTask, StartChild
from ...core.timeutil import parse_iso
from ..port import ConcurrencyError, Sealer
from ..states import StateCache

__all__ = ["GENESIS", "SqlBase", "ms_of"]

# The hash a run's chain starts from: the "previous hash" of its first event.
GENESIS = "0" * 64


def ms_of(text: str) -> int:
    return int(parse_iso(text).timestamp() * 1000)


# The order in which batch() sends its buffered writes, one executemany per kind. Different runs'
# writes touch different rows; for one transition this is the order its effects need (a task row is
# created before it is leased or closed). Anything else a batch sends first flushes the buffer.
_FLUSH_ORDER = (
    "event_insert",
    "run_update",
    "task_insert",
    "task_insert_leased",
    "task_lease",
    "task_close",
    "timer_insert",
    "timer_close",
    "child_insert",  # sqltx/children.py: the outbox rows of `run` steps
    "child_cancel",
    "child_end",
    "webhook_deliveries_insert",  # sqltx/webhooks.py: an INSERT ... SELECT over the subscriptions
    "notify_tasks",
    "notify_timers",
)


def wake_channels(effects: Sequence[Effect]) -> set[str]:
    """The channels a transition's effects wake other processes on (PostgreSQL NOTIFY, SQLite's wake
    directory): tasks queued for any worker (a task leased in the same transition, by eager dispatch,
    is nobody else's), and timers and child runs for the schedulers."""
    leased = {fx.task_id for fx in effects if isinstance(fx, LeaseTask)}
    out = set()
    if any(isinstance(fx, CreateTask) and fx.task_id not in leased for fx in effects):
        out.add("lockstep_tasks")
    if any(isinstance(fx, CreateTimer | StartChild | CancelChild | EndChild) for fx in effects):
        out.add("lockstep_timers")  # a child run's row is the scheduler's work too
    return out


class _FlushFirst:
    """The connection as a transaction sees it inside batch(): any statement it sends itself (a read, a
    write with an answer) goes after the buffered writes, so it sees them."""

    def __init__(self, tx: SqlBase, conn: Any) -> None:
        self.tx = tx
        self.conn = conn

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        self.tx.flush()
        return self.conn.execute(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


class SqlBase:
    """One transaction's connection and queries, shared by the SQL backends and every aggregate module.

    Each backend gives its connection (DB-API style: execute returns a cursor), its named queries (same
    names, its own dialect) and the exception its driver raises for constraint violations.
    """

    def __init__(
        self,
        conn: Any,
        queries: dict[str, str],
        integrity_error: type[Exception],
        states: StateCache | None = None,
        sealer: Sealer | None = None,
    ) -> None:
        self.c = conn
        self.q = queries
        self.integrity_error = integrity_error
        self.states = states
        # Opens sealed values of what this transaction loads (None: nothing here can open one).
        self.sealer = sealer
        self._w: Any = None
        # Inside batch(): the writes not sent yet, and the row-count checks (cursor, rows expected, what)
        # run once the batch's writes are through.
        self._pending: list[tuple[str, dict[str, Any]]] | None = None
        self._deferred: list[tuple[Any, int, str]] | None = None

    def _write(self, query: str, params: dict[str, Any]) -> None:
        """A write whose answer nobody reads: buffered inside batch(), else sent at once."""
        if self._pending is not None:
            self._pending.append((query, params))
        else:
            self.w.execute(self.q[query], params)

    def flush(self) -> None:
        """Send the writes buffered by batch(), one executemany per kind in _FLUSH_ORDER."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        conn = self.c.conn if isinstance(self.c, _FlushFirst) else self.c
        by_query: dict[str, list[dict[str, Any]]] = {}
        for query, params in pending:
            by_query.setdefault(query, []).append(params)
        if not by_query.keys() <= set(_FLUSH_ORDER):  # pragma: no cover - a new buffered write kind
            raise RuntimeError(f"no flush order for {sorted(by_query.keys() - set(_FLUSH_ORDER))}")
        for query in _FLUSH_ORDER:
            rows = by_query.get(query)
            if not rows:
                continue
            if query.startswith("notify_"):  # once per batch: NOTIFY is delivered once per channel
                conn.execute(self.q[query])
                continue
            cur = conn.cursor()
            cur.executemany(self.q[query], rows)
            if query == "run_update" and self._deferred is not None:
                self._deferred.append((cur, len(rows), f"one of {len(rows)} runs"))

    @property
    def w(self) -> Any:
        """One cursor for the writes whose answer nobody reads (inserts, closes): on PostgreSQL a new
        cursor per statement cost as much Python time as the statement itself. Errors still surface."""
        if self._w is None:
            self._w = self.c.cursor()
        return self._w

    def _one(self, query: str, **params: Any) -> Any:
        return self.c.execute(self.q[query], params).fetchone()

    # --- TxControl: batches and savepoints -----------------------------------------------------
    @contextmanager
    def batch(self) -> Iterator[None]:
        """Several appends written together: their unanswered writes are buffered and sent as one
        executemany per kind (in one pipeline on PostgreSQL: one round trip), and their row-count
        checks run when the block ends; a failed one fails the block (undo it with a savepoint). A
        read inside the block first sends the buffered writes, so it sees them."""
        if self._deferred is not None:  # nested: part of the outer batch
            yield
            return
        self._deferred, self._pending = [], []
        conn, self.c = self.c, _FlushFirst(self, self.c)
        try:
            try:
                with self.pipeline():
                    yield
                    self.flush()
            except self.integrity_error:
                raise ConcurrencyError("a run of the batch was changed by another writer") from None
            checks = self._deferred
        finally:
            self.c, self._deferred, self._pending = conn, None, None
        for cur, expected, what in checks:
            if cur.rowcount != expected:
                raise ConcurrencyError(f"{what} moved on meanwhile")

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """A nested transaction: on an exception only the work inside it is undone."""
        self.c.execute("SAVEPOINT lockstep_item")
        try:
            yield
        except BaseException:
            self.c.execute("ROLLBACK TO SAVEPOINT lockstep_item")
            self.c.execute("RELEASE SAVEPOINT lockstep_item")
            raise
        self.c.execute("RELEASE SAVEPOINT lockstep_item")

    # --- where the backends differ (PgTx overrides these) --------------------------------------
    def pipeline(self) -> AbstractContextManager[Any]:
        """Batch the statements of the block into one round trip where the driver can (PostgreSQL)."""
        return nullcontext()

    def hint(self, effects: Sequence[Effect]) -> None:
        """Wake-up hints for other processes after commit (PostgreSQL NOTIFY); polling stays correct alone."""

    def list_param(self, values: Sequence[str]) -> Any:
        """How this backend passes a list to `IN` (SQLite: JSON for json_each; PostgreSQL: an array)."""
        return json.dumps(list(values))
