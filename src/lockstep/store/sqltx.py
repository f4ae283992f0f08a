"""The backend-neutral half of the SQL adapters: one transaction's operations over named queries."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from ..core.canonical import canonical_json, compact_json, parse_json
from ..core.effects import (
    CloseApprovalRequest,
    CloseTask,
    CloseTimer,
    CreateTask,
    CreateTimer,
    DeadLetterTask,
    Effect,
    LeaseTask,
    NotifyApprovers,
    OpenApprovalRequest,
    RecordApprovalDecision,
    RevokeLinks,
    UpdateApprovers,
)
from ..core.events import Event, chain_link
from ..core.evolve import fold
from ..core.state import OutdatedSnapshot, RunState
from ..core.throttle import LoginCounter
from ..core.timeutil import parse_iso
from .port import (
    ConcurrencyError,
    DefinitionRow,
    DueTimer,
    ExpiredLease,
    LoadedRun,
    TaskRow,
    TenantRow,
    UserRow,
)
from .states import StateCache

__all__ = ["GENESIS", "SqlTx", "ms_of"]

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
    "notify_tasks",
    "notify_timers",
)


class _FlushFirst:
    """The connection as a transaction sees it inside batch(): any statement it sends itself (a read, a
    write with an answer) goes after the buffered writes, so it sees them."""

    def __init__(self, tx: SqlTx, conn: Any) -> None:
        self.tx = tx
        self.conn = conn

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        self.tx.flush()
        return self.conn.execute(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


class SqlTx:
    """Operations inside one transaction, shared by the SQL backends.

    Each backend gives its connection (DB-API style: execute returns a cursor), its named queries (same
    names, its own dialect) and the exception its driver raises for constraint violations.
    """

    def __init__(
        self,
        conn: Any,
        queries: dict[str, str],
        integrity_error: type[Exception],
        states: StateCache | None = None,
    ) -> None:
        self.c = conn
        self.q = queries
        self.integrity_error = integrity_error
        self.states = states
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

    # --- definitions ---------------------------------------------------------------------------
    def _def(self, name: str, row: Any) -> DefinitionRow | None:
        return DefinitionRow(name, row[0], row[1], json.loads(row[2])) if row else None

    def definition(self, tenant: str, name: str, version: int | None) -> DefinitionRow | None:
        if version is None:
            return self._def(name, self._one("definition_latest", tenant=tenant, name=name))
        return self._def(name, self._one("definition_by_version", tenant=tenant, name=name, version=version))

    def definition_by_digest(self, tenant: str, name: str, digest: str) -> DefinitionRow | None:
        return self._def(name, self._one("definition_by_digest", tenant=tenant, name=name, digest=digest))

    def insert_definition(self, tenant: str, row: DefinitionRow, created_at: str) -> None:
        try:
            self.c.execute(
                self.q["definition_insert"],
                {
                    "tenant": tenant,
                    "name": row.name,
                    "version": row.version,
                    "digest": row.digest,
                    "document": canonical_json(row.document),
                    "created_at": created_at,
                },
            )
        except self.integrity_error as exc:
            raise ConcurrencyError(str(exc)) from None

    def definitions(self, tenant: str) -> list[dict[str, Any]]:
        rows = self.c.execute(self.q["definitions_list"], {"tenant": tenant}).fetchall()
        return [{"name": r[0], "version": r[1], "digest": r[2], "created_at": r[3]} for r in rows]

    # --- runs and events -----------------------------------------------------------------------
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
        return out

    def _loaded(self, run_id: str, row: Any) -> LoadedRun | None:
        if row is None:
            return None
        cached = self.states.get(run_id, row[2]) if self.states is not None else None
        if cached is not None:
            return LoadedRun(cached, row[2])
        try:
            return LoadedRun(RunState.from_json(parse_json(row[1])), row[2])
        except OutdatedSnapshot:
            # Written by an older lockstep: the events are the facts, so rebuild the snapshot from them.
            state = fold([e for e, _h in self.events(run_id)])
            if state is None:  # pragma: no cover - a run row always has its RunStarted event
                return None
            return LoadedRun(state, row[2])

    def run_by_key(self, tenant: str, start_key: str) -> tuple[str, str | None] | None:
        row = self._one("run_by_key", tenant=tenant, start_key=start_key)
        return (row[0], row[1]) if row else None

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
    ) -> None:
        expected = before.state.seq if before else 0
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
            "snapshot": compact_json(after.to_json(copy_values=False)),
            "last_hash": h,
            "updated_at": after.updated_at,
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
                self._apply(after, effects, now_ms, lease_until_ms)
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
        if self.states is not None and after.active is not None and after.active.worker is not None:
            # An attempt is out: its result (this process's or another's) is the run's next command.
            # Runs that wait for days are not kept; the entry is used only while the head is still h.
            self.states.put(after.run_id, h, after)

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

    def pipeline(self) -> AbstractContextManager[Any]:
        """Batch the statements of the block into one round trip where the driver can (PostgreSQL)."""
        return nullcontext()

    def hint(self, effects: Sequence[Effect]) -> None:
        """Wake-up hints for other processes after commit (PostgreSQL NOTIFY); polling stays correct alone."""

    def _apply(
        self, run: RunState, effects: Sequence[Effect], now_ms: int, lease_until_ms: int | None = None
    ) -> None:
        # A task created and leased in the same transition (eager dispatch) is inserted leased: one
        # statement instead of two.
        leases = {fx.task_id: fx for fx in effects if isinstance(fx, LeaseTask)}
        created = {fx.task_id for fx in effects if isinstance(fx, CreateTask)}
        for fx in effects:
            if isinstance(fx, CreateTask):
                lease = leases.get(fx.task_id)
                self._write(
                    "task_insert" if lease is None else "task_insert_leased",
                    {
                        **(self._lease_params(lease, lease_until_ms) if lease is not None else {}),
                        "task_id": fx.task_id,
                        "tenant": run.tenant,
                        "run_id": run.run_id,
                        "step": fx.step,
                        "attempt": fx.attempt,
                        "kind": fx.kind,
                        "activity": fx.activity,
                        "queue": fx.queue or "default",
                        "input": compact_json(fx.input),
                        "idempotency_key": fx.idempotency_key,
                        "definition": run.definition["name"],
                        "version": run.definition["version"],
                        "delivery": fx.delivery,
                        "timeout_ms": fx.timeout_ms,
                        "priority": fx.priority,
                        "now": now_ms,
                    },
                )
            elif isinstance(fx, LeaseTask):
                if fx.task_id not in created:  # else inserted leased above
                    self._write("task_lease", self._lease_params(fx, lease_until_ms))
            elif isinstance(fx, DeadLetterTask):
                self.dead_letter(fx.task_id, fx.reason)
            elif isinstance(fx, CloseTask):
                self.close_task(fx.task_id, fx.status)
            elif isinstance(fx, CreateTimer):
                self._write(
                    "timer_insert",
                    {
                        "run_id": run.run_id,
                        "key": fx.key,
                        "generation": fx.generation,
                        "tenant": run.tenant,
                        "fire_at": ms_of(fx.fire_at),
                    },
                )
            elif isinstance(fx, CloseTimer):
                self.close_timer(run.run_id, fx.key, fx.generation, fx.status)
            else:
                self._apply_approval(run, fx, now_ms)

    @staticmethod
    def _lease_params(fx: LeaseTask, lease_until_ms: int | None) -> dict[str, Any]:
        deadline = ms_of(fx.deadline)
        return {
            "task_id": fx.task_id,
            "fencing": fx.fencing,
            "worker": fx.worker,
            "lease_expires_at": min(deadline, lease_until_ms or deadline),
            "deadline": deadline,
        }

    def _apply_approval(self, run: RunState, fx: Effect, now_ms: int) -> None:
        if isinstance(fx, OpenApprovalRequest):
            self.c.execute(
                self.q["approval_request_insert"],
                {
                    "request_id": fx.request_id,
                    "tenant": run.tenant,
                    "run_id": run.run_id,
                    "step": fx.step,
                    "users": json.dumps(list(fx.users)),
                    "groups": json.dumps(list(fx.groups)),
                    "initiator": fx.initiator,
                    "allow_initiator": int(fx.allow_initiator),
                    "expires_at": ms_of(fx.expires_at),
                    "created_at": run.updated_at,
                },
            )
        elif isinstance(fx, UpdateApprovers):
            row = self.approval_request(fx.request_id)
            if row is not None:
                users = [fx.new if u == fx.old else u for u in row["users"]]
                users = list(dict.fromkeys([*users, fx.new]))
                self.c.execute(
                    self.q["approval_request_users"],
                    {"request_id": fx.request_id, "users": json.dumps(users)},
                )
        elif isinstance(fx, RecordApprovalDecision):
            try:
                self.c.execute(
                    self.q["approval_decision_insert"],
                    {
                        "request_id": fx.request_id,
                        "approver": fx.approver,
                        "decision": fx.decision,
                        "link_id": fx.link_id,
                        "at": fx.at,
                    },
                )
            except self.integrity_error:
                raise ConcurrencyError(f"{fx.approver} already decided on {fx.request_id}") from None
        elif isinstance(fx, CloseApprovalRequest):
            self.c.execute(
                self.q["approval_request_close"], {"request_id": fx.request_id, "status": fx.status}
            )
            self.revoke_links(fx.request_id, None, None)
        elif isinstance(fx, RevokeLinks):
            self.revoke_links(fx.request_id, fx.approver, fx.link_id)
        elif isinstance(fx, NotifyApprovers):
            self.c.execute(
                self.q["notification_insert"],
                {
                    "tenant": run.tenant,
                    "run_id": run.run_id,
                    "request_id": fx.request_id,
                    "approver": fx.approver,
                    "now": now_ms,
                },
            )

    # --- approvals -----------------------------------------------------------------------------
    def _request(self, r: Any) -> dict[str, Any]:
        return {
            "request_id": r[0],
            "tenant": r[1],
            "run_id": r[2],
            "step": r[3],
            "users": json.loads(r[4]),
            "groups": json.loads(r[5]),
            "initiator": r[6],
            "allow_initiator": bool(r[7]),
            "status": r[8],
            "expires_at": r[9],
            "created_at": r[10],
        }

    def approval_request(self, request_id: str) -> dict[str, Any] | None:
        r = self._one("approval_request_get", request_id=request_id)
        return self._request(r) if r else None

    def pending_approval_requests(self, tenant: str) -> list[dict[str, Any]]:
        return [
            self._request(r) for r in self.c.execute(self.q["approval_requests_pending"], {"tenant": tenant})
        ]

    def approval_decision(self, request_id: str, approver: str) -> dict[str, Any] | None:
        r = self._one("approval_decision_get", request_id=request_id, approver=approver)
        return {"decision": r[0], "link_id": r[1], "at": r[2]} if r else None

    def _link(self, r: Any) -> dict[str, Any]:
        return {
            "link_id": r[0],
            "tenant": r[1],
            "run_id": r[2],
            "step": r[3],
            "request_id": r[4],
            "approver": r[5],
            "status": r[6],
            "expires_at": r[7],
            "created_at": r[8],
            "used_at": r[9],
            "decision": r[10],
        }

    def insert_link(self, link: dict[str, Any], token_hash: str) -> None:
        self.c.execute(
            self.q["link_insert"],
            {
                **{
                    k: link[k]
                    for k in (
                        "link_id",
                        "tenant",
                        "run_id",
                        "step",
                        "request_id",
                        "approver",
                        "expires_at",
                        "created_at",
                    )
                },
                "token_hash": token_hash,
            },
        )

    def link_by_hash(self, token_hash: str) -> dict[str, Any] | None:
        r = self._one("link_by_hash", token_hash=token_hash)
        return self._link(r) if r else None

    def link_by_id(self, link_id: str) -> dict[str, Any] | None:
        r = self._one("link_by_id", link_id=link_id)
        return self._link(r) if r else None

    def links_of_request(self, request_id: str) -> list[dict[str, Any]]:
        return [self._link(r) for r in self.c.execute(self.q["links_of_request"], {"request_id": request_id})]

    def consume_link(self, token_hash: str, decision: str, used_at: str) -> bool:
        cur = self.c.execute(
            self.q["link_consume"], {"token_hash": token_hash, "decision": decision, "used_at": used_at}
        )
        return bool(cur.rowcount == 1)

    def revoke_links(self, request_id: str, approver: str | None, link_id: str | None) -> int:
        cur = self.c.execute(
            self.q["links_revoke"], {"request_id": request_id, "approver": approver, "link_id": link_id}
        )
        return int(cur.rowcount)

    def claim_notifications(self, now_ms: int, limit: int, lease_ms: int) -> list[dict[str, Any]]:
        rows = self.c.execute(self.q["notifications_ready"], {"now": now_ms, "limit": limit}).fetchall()
        for r in rows:
            self.c.execute(self.q["notification_lease"], {"id": r[0], "until": now_ms + lease_ms})
        return [
            {
                "id": r[0],
                "tenant": r[1],
                "run_id": r[2],
                "request_id": r[3],
                "approver": r[4],
                "attempts": r[5] + 1,
            }
            for r in rows
        ]

    def finish_notification(self, nid: int, status: str, error: str | None, available_at: int) -> None:
        self.c.execute(
            self.q["notification_finish"],
            {"id": nid, "status": status, "error": error, "available_at": available_at},
        )

    def tenant_users(self, tenant: str) -> list[UserRow]:
        return [self._user(r) for r in self.c.execute(self.q["users_in_groups"], {"tenant": tenant})]

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
        return [(Event.from_row(r[0], r[1], r[2], r[3], r[4]), r[5]) for r in rows]

    # --- tasks and timers ----------------------------------------------------------------------
    def _task(self, r: Any) -> TaskRow:
        return TaskRow(
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            r[5],
            r[6],
            r[7],
            parse_json(r[8]),
            r[9],
            r[10],
            r[11],
            r[12],
            r[13],
            r[14],
            r[15],
            r[16],
            r[17],
            r[18],
        )

    def task(self, task_id: str) -> TaskRow | None:
        r = self._one("task_get", task_id=task_id)
        return self._task(r) if r else None

    def tasks(self, task_ids: Sequence[str]) -> dict[str, TaskRow]:
        """Several tasks in one query, by id; unknown ids are absent."""
        rows = self.c.execute(self.q["tasks_get_many"], {"task_ids": self.list_param(task_ids)})
        return {r[0]: self._task(r) for r in rows}

    def set_lease(self, task_id: str, lease_expires_at: int) -> None:
        self.c.execute(self.q["task_set_lease"], {"task_id": task_id, "until": lease_expires_at})

    def heartbeat(self, task_id: str, fencing: int, lease_until_ms: int) -> bool:
        cur = self.c.execute(
            self.q["task_heartbeat"], {"task_id": task_id, "fencing": fencing, "lease_until": lease_until_ms}
        )
        return bool(cur.rowcount == 1)

    def abandon_leases(self, owner: str, now_ms: int) -> int:
        cur = self.c.execute(self.q["leases_abandon"], {"owner": owner, "now": now_ms})
        return int(cur.rowcount)

    def close_task(self, task_id: str, status: str) -> None:
        self._write("task_close", {"task_id": task_id, "status": status})

    def expired_leases(
        self, now_ms: int, limit: int, partitions: list[int] | None = None
    ) -> list[ExpiredLease]:
        params = {"now": now_ms, "limit": limit, "partitions": partitions}
        rows = self.c.execute(self.q["leases_expired"], params).fetchall()
        return [ExpiredLease(r[0], r[1], r[2], r[3], r[4], r[5]) for r in rows]

    def due_timers(self, now_ms: int, limit: int, partitions: list[int] | None = None) -> list[DueTimer]:
        params = {"now": now_ms, "limit": limit, "partitions": partitions}
        rows = self.c.execute(self.q["timers_due"], params).fetchall()
        return [DueTimer(r[0], r[1], r[2]) for r in rows]

    def timer_status(self, run_id: str, key: str, generation: int) -> str | None:
        row = self._one("timer_status", run_id=run_id, key=key, generation=generation)
        return str(row[0]) if row else None

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

    # --- fair claiming, quotas, dead letters, scheduler partitions -----------------------------
    def list_param(self, values: Sequence[str]) -> Any:
        """How this backend passes a list to `IN` (SQLite: JSON for json_each; PostgreSQL: an array)."""
        return json.dumps(list(values))

    def ready_tenants(self) -> list[str]:
        return [r[0] for r in self.c.execute(self.q["ready_tenants"], {})]

    def ready_ids(
        self,
        tenant: str,
        activities: Sequence[str],
        queue: str,
        now_ms: int,
        limit: int,
        served: Sequence[str] | None = None,
    ) -> list[str]:
        """Ready task ids of a tenant; `served` ("name:version" pairs) limits them to the definition
        versions a worker declares it runs (so old and new workers can run side by side)."""
        params = {
            "tenant": tenant,
            "activities": self.list_param(activities),
            "queue": queue,
            "now": now_ms,
            "limit": limit,
            "served": self.list_param(served) if served is not None else None,
        }
        return [r[0] for r in self.c.execute(self.q["ready_ids"], params)]

    def scheduled_timers(self, tenant: str) -> int:
        return int(self._one("scheduled_timers", tenant=tenant)[0])

    def leased_count(self, tenant: str) -> int:
        return int(self._one("leased_count", tenant=tenant)[0])

    def lock_tenant(self, name: str) -> None:
        """Serialise quota checks of one tenant (a no-op where writers are already serialised)."""

    def dead_letter(self, task_id: str, reason: str) -> None:
        self.c.execute(self.q["task_dead"], {"task_id": task_id, "reason": reason})

    def stale_ready(self, before_ms: int, limit: int) -> list[tuple[str, str, str, str, int]]:
        rows = self.c.execute(self.q["stale_ready"], {"before": before_ms, "limit": limit}).fetchall()
        return [(r[0], r[1], r[2], r[3], r[4]) for r in rows]

    def dead_tasks(self, tenant: str, limit: int) -> list[dict[str, Any]]:
        rows = self.c.execute(self.q["dead_tasks"], {"tenant": tenant, "limit": limit}).fetchall()
        return [
            {
                "task_id": r[0],
                "run_id": r[1],
                "step": r[2],
                "attempt": r[3],
                "activity": r[4],
                "reason": r[5],
                "created_at": r[6],
            }
            for r in rows
        ]

    def scheduler_partitions(self, owner: str, now_ms: int, ttl_ms: int) -> list[int] | None:
        """The partitions this scheduler may work on; None means all (a single-writer backend)."""
        return None

    def close_timer(self, run_id: str, key: str, generation: int, status: str) -> None:
        self._write("timer_close", {"run_id": run_id, "key": key, "generation": generation, "status": status})

    def next_wakeup_ms(self) -> int | None:
        a = self._one("next_timer")[0]
        b = self._one("next_lease_expiry")[0]
        vals = [v for v in (a, b) if v is not None]
        return min(vals) if vals else None

    def task_counts(self) -> dict[str, int]:
        return {r[0]: r[1] for r in self.c.execute(self.q["task_counts"])}

    # --- tenants, users, sessions, audit ------------------------------------------------------
    def tenant(self, name: str) -> TenantRow | None:
        r = self._one("tenant_get", name=name)
        return TenantRow(r[0], json.loads(r[1]), r[2], r[3], r[4]) if r else None

    def tenants(self) -> list[TenantRow]:
        return [
            TenantRow(r[0], json.loads(r[1]), r[2], r[3], r[4])
            for r in self.c.execute(self.q["tenants_list"])
        ]

    def insert_tenant(self, name: str, settings: dict[str, Any], created_at: str) -> None:
        try:
            self.c.execute(
                self.q["tenant_insert"],
                {"name": name, "settings": canonical_json(settings), "created_at": created_at},
            )
        except self.integrity_error:
            raise ConcurrencyError(f"tenant {name} already exists") from None

    def update_tenant_settings(self, name: str, settings: dict[str, Any]) -> None:
        self.c.execute(self.q["tenant_update_settings"], {"name": name, "settings": canonical_json(settings)})

    def update_tenant_bucket(self, name: str, tokens: float, at_ms: int) -> None:
        self.c.execute(self.q["tenant_update_bucket"], {"name": name, "tokens": tokens, "at_ms": at_ms})

    def _user(self, r: Any) -> UserRow:
        return UserRow(
            r[0],
            r[1],
            tuple(json.loads(r[2])),
            tuple(json.loads(r[3])),
            r[4],
            r[5],
            bool(r[6]),
            r[7],
            r[8],
            int(r[9]),
        )

    def user(self, tenant: str, name: str) -> UserRow | None:
        r = self._one("user_get", tenant=tenant, name=name)
        return self._user(r) if r else None

    def user_by_key(self, key_hash: str) -> UserRow | None:
        r = self._one("user_by_key", key_hash=key_hash)
        return self._user(r) if r else None

    def users(self, tenant: str) -> list[UserRow]:
        return [self._user(r) for r in self.c.execute(self.q["users_list"], {"tenant": tenant})]

    def insert_user(self, u: UserRow) -> None:
        try:
            self.c.execute(
                self.q["user_insert"],
                {
                    "tenant": u.tenant,
                    "name": u.name,
                    "roles": json.dumps(list(u.roles)),
                    "groups": json.dumps(list(u.groups)),
                    "key_hash": u.key_hash,
                    "created_at": u.created_at,
                },
            )
        except self.integrity_error:
            raise ConcurrencyError(f"user {u.name} already exists in tenant {u.tenant}") from None

    def update_user(self, u: UserRow) -> None:
        self.c.execute(
            self.q["user_update"],
            {
                "tenant": u.tenant,
                "name": u.name,
                "roles": json.dumps(list(u.roles)),
                "groups": json.dumps(list(u.groups)),
                "key_hash": u.key_hash,
                "password_hash": u.password_hash,
                "disabled": int(u.disabled),
                "email": u.email,
            },
        )

    def end_sessions(self, tenant: str, name: str) -> int | None:
        # The increment is one statement: two changes racing each other both raise the generation.
        r = self._one("user_end_sessions", tenant=tenant, name=name)
        if r is None:
            return None
        self.c.execute(self.q["sessions_of_user_delete"], {"tenant": tenant, "name": name})
        return int(r[0])

    def insert_session(
        self,
        id_hash: str,
        tenant: str,
        user: str,
        csrf: str,
        created_ms: int,
        expires_ms: int,
        generation: int,
    ) -> None:
        self.c.execute(
            self.q["session_insert"],
            {
                "id_hash": id_hash,
                "tenant": tenant,
                "user": user,
                "csrf": csrf,
                "created_at": created_ms,
                "expires_at": expires_ms,
                "generation": generation,
            },
        )

    def session(self, id_hash: str) -> tuple[str, str, str, int, int] | None:
        r = self._one("session_get", id_hash=id_hash)
        return (r[0], r[1], r[2], r[3], int(r[4])) if r else None

    def login_counters(self, keys: Sequence[str], now_ms: int) -> dict[str, LoginCounter]:
        self.c.execute(self.q["login_counters_prune"], {"now": now_ms})
        out = {}
        for key in sorted(set(keys)):  # one order for every transaction: no deadlock between two
            self.c.execute(self.q["login_counter_ensure"], {"key": key, "now": now_ms})
            r = self._one("login_counter_get", key=key)
            out[key] = LoginCounter(
                r[0], int(r[1]), int(r[2]), None if r[3] is None else int(r[3]), int(r[4])
            )
        return out

    def save_login_counter(self, counter: LoginCounter, expires_ms: int) -> None:
        self.c.execute(
            self.q["login_counter_save"],
            {
                "key": counter.key,
                "attempts": counter.attempts,
                "window_start": counter.window_start_ms,
                "locked_until": counter.locked_until_ms,
                "lockouts": counter.lockouts,
                "expires_at": expires_ms,
            },
        )

    def delete_login_counter(self, key: str) -> None:
        self.c.execute(self.q["login_counter_delete"], {"key": key})

    def delete_session(self, id_hash: str, now_ms: int) -> None:
        self.c.execute(self.q["session_delete"], {"id_hash": id_hash, "now": now_ms})

    def audit(
        self,
        at: str,
        tenant: str | None,
        actor: str | None,
        action: str,
        target: str | None,
        outcome: str,
        detail: dict[str, Any],
    ) -> None:
        self.c.execute(
            self.q["audit_insert"],
            {
                "at": at,
                "tenant": tenant,
                "actor": actor,
                "action": action,
                "target": target,
                "outcome": outcome,
                "detail": canonical_json(detail),
            },
        )

    def audit_log(self, tenant: str, limit: int) -> list[dict[str, Any]]:
        rows = self.c.execute(self.q["audit_list"], {"tenant": tenant, "limit": limit}).fetchall()
        return [
            {
                "id": r[0],
                "at": r[1],
                "tenant": r[2],
                "actor": r[3],
                "action": r[4],
                "target": r[5],
                "outcome": r[6],
                "detail": json.loads(r[7]),
            }
            for r in rows
        ]

    def active_runs(self, tenant: str) -> int:
        return int(self._one("active_runs_count", tenant=tenant)[0])

    def stats(self, now_ms: int) -> dict[str, Any]:
        """Aggregates for metrics: runs by status, ready-queue depth/age, overdue timers (by tenant)."""
        return {
            "runs": [tuple(r) for r in self.c.execute(self.q["runs_by_status"])],
            "queues": [tuple(r) for r in self.c.execute(self.q["queue_stats"])],
            "timers": [tuple(r) for r in self.c.execute(self.q["timer_lag"], {"now": now_ms})],
        }
