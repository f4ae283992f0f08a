"""The storage port: what the application layer needs of a database, one small protocol per aggregate.

A `Store` opens transactions; a transaction, `Tx`, offers every aggregate's operations at once:

    TxControl        batch() and savepoint(): how several writes go together
    DefinitionsTx    published workflow definitions
    RunsTx           runs, their events and snapshots; `append` is the write path of every command
    WorkTx           tasks: the ready queue, claims, leases, heartbeats, quotas, dead letters
    SchedulerTx      timers, expired leases, scheduler partitions, the next wake-up
    ApprovalsTx      approval requests, decisions, single-use links
    NotificationsTx  the outbox of approval notifications
    TenantsTx        tenants, their settings and rate buckets
    PrincipalsTx     users, sessions, login counters
    AuditTx          the audit log
    MetricsTx        aggregates for the metrics endpoint

Each protocol is implemented by the module of the same name in `sqltx/` (RunsTx by `sqltx/runs.py`).

One write transaction per command: load the run, decide, then `append` the events with the expected
sequence, the new snapshot and the outbox effects. A lost race raises ConcurrencyError (retry it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from ..core.auditchain import AuditHead, StoredAudit
from ..core.effects import Effect
from ..core.events import Event
from ..core.state import RunState
from ..core.throttle import LoginCounter

__all__ = [
    "ApprovalsTx",
    "AuditFilter",
    "AuditTx",
    "ConcurrencyError",
    "DefinitionRow",
    "DefinitionsTx",
    "DueTimer",
    "ExpiredLease",
    "LoadedRun",
    "MetricsTx",
    "NotificationsTx",
    "PrincipalsTx",
    "RowLocked",
    "RunsTx",
    "SchedulerTx",
    "SchemaError",
    "Store",
    "StoreUnavailable",
    "TaskRow",
    "TenantRow",
    "TenantsTx",
    "Tx",
    "TxControl",
    "UserRow",
    "WorkTx",
]


class ConcurrencyError(Exception):
    """Another writer appended first (expected sequence did not match, or a unique key was taken)."""


class RowLocked(Exception):
    """Another transaction holds the row; skip it now and come back later."""


class StoreUnavailable(Exception):
    """The database cannot be reached or stayed locked past the busy timeout."""


class SchemaError(Exception):
    """The database schema is not the one this build needs (message says what to run)."""


class TxControl(Protocol):
    def batch(self) -> AbstractContextManager[None]:
        """Several appends' writes in one round trip; their checks run (and may fail) at the end."""
        ...

    def savepoint(self) -> AbstractContextManager[None]: ...


# --- definitions -------------------------------------------------------------------------------
@dataclass(frozen=True)
class DefinitionRow:
    name: str
    version: int
    digest: str
    document: dict[str, Any]


class DefinitionsTx(Protocol):
    def definition(self, tenant: str, name: str, version: int | None) -> DefinitionRow | None: ...
    def definition_by_digest(self, tenant: str, name: str, digest: str) -> DefinitionRow | None: ...
    def insert_definition(self, tenant: str, row: DefinitionRow, created_at: str) -> None: ...
    def definitions(self, tenant: str) -> list[dict[str, Any]]: ...


# --- runs and events ---------------------------------------------------------------------------
@dataclass(frozen=True)
class LoadedRun:
    state: RunState
    last_hash: str


class RunsTx(Protocol):
    def load_run(self, run_id: str, *, skip_locked: bool = False) -> LoadedRun | None: ...
    def load_runs(self, run_ids: Sequence[str], *, skip_locked: bool = False) -> dict[str, LoadedRun]: ...
    def run_by_key(self, tenant: str, start_key: str) -> tuple[str, str | None] | None: ...
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
        """Append `events` after `before` (or create the run), write the snapshot and apply `effects`;
        an attempt leased by these events holds its lease until `lease_until_ms` (else its deadline)."""
        ...

    def runs(
        self,
        tenant: str,
        *,
        status: str | None,
        definition: str | None,
        after: str,
        limit: int,
        before: str | None = None,
    ) -> list[RunState]: ...
    def run_ids(self, tenant: str | None) -> list[str]: ...
    def events(self, run_id: str) -> list[tuple[Event, str]]: ...
    def active_runs(self, tenant: str) -> int: ...


# --- work: tasks -------------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskRow:
    task_id: str
    tenant: str
    run_id: str
    step: str
    attempt: int
    kind: str
    activity: str
    queue: str
    input: Any
    idempotency_key: str
    definition: str
    version: int
    delivery: str
    timeout_ms: int
    status: str
    fencing: int | None
    lease_owner: str | None
    lease_expires_at: int | None
    deadline: int | None


class WorkTx(Protocol):
    def task(self, task_id: str) -> TaskRow | None: ...
    def tasks(self, task_ids: Sequence[str]) -> dict[str, TaskRow]: ...
    def set_lease(self, task_id: str, lease_expires_at: int) -> None: ...
    def heartbeat(self, task_id: str, fencing: int, lease_until_ms: int) -> bool: ...
    def abandon_leases(self, owner: str, now_ms: int) -> int:
        """Make every lease `owner` holds expire now (its previous incarnation died); how many."""
        ...

    def close_task(self, task_id: str, status: str) -> None: ...
    def ready_tenants(self) -> list[str]: ...
    def ready_ids(
        self,
        tenant: str,
        activities: Sequence[str],
        queue: str,
        now_ms: int,
        limit: int,
        served: Sequence[str] | None = None,
    ) -> list[str]: ...
    def leased_count(self, tenant: str) -> int: ...
    def lock_tenant(self, name: str) -> None: ...
    def dead_letter(self, task_id: str, reason: str) -> None: ...
    def stale_ready(self, before_ms: int, limit: int) -> list[tuple[str, str, str, str, int]]: ...
    def dead_tasks(self, tenant: str, limit: int) -> list[dict[str, Any]]: ...
    def task_counts(self) -> dict[str, int]: ...


# --- the scheduler: timers, lease expiry, partitions --------------------------------------------
@dataclass(frozen=True)
class DueTimer:
    run_id: str
    key: str
    generation: int


@dataclass(frozen=True)
class ExpiredLease:
    task_id: str
    run_id: str
    attempt: int
    fencing: int
    worker: str
    deadline: int


class SchedulerTx(Protocol):
    def expired_leases(
        self, now_ms: int, limit: int, partitions: list[int] | None = None
    ) -> list[ExpiredLease]: ...
    def due_timers(self, now_ms: int, limit: int, partitions: list[int] | None = None) -> list[DueTimer]: ...
    def timer_status(self, run_id: str, key: str, generation: int) -> str | None: ...
    def close_timer(self, run_id: str, key: str, generation: int, status: str) -> None: ...
    def scheduled_timers(self, tenant: str) -> int: ...
    def scheduler_partitions(self, owner: str, now_ms: int, ttl_ms: int) -> list[int] | None: ...
    def next_wakeup_ms(self) -> int | None: ...


# --- approvals: requests (for inboxes), single-use links (hash only), decisions -----------------
class ApprovalsTx(Protocol):
    def approval_request(self, request_id: str) -> dict[str, Any] | None: ...
    def pending_approval_requests(self, tenant: str) -> list[dict[str, Any]]: ...
    def approval_decision(self, request_id: str, approver: str) -> dict[str, Any] | None: ...
    def insert_link(self, link: dict[str, Any], token_hash: str) -> None: ...
    def link_by_hash(self, token_hash: str) -> dict[str, Any] | None: ...
    def link_by_id(self, link_id: str) -> dict[str, Any] | None: ...
    def links_of_request(self, request_id: str) -> list[dict[str, Any]]: ...
    def consume_link(self, token_hash: str, decision: str, used_at: str) -> bool: ...
    def revoke_links(self, request_id: str, approver: str | None, link_id: str | None) -> int: ...


class NotificationsTx(Protocol):
    def claim_notifications(self, now_ms: int, limit: int, lease_ms: int) -> list[dict[str, Any]]: ...
    def finish_notification(self, nid: int, status: str, error: str | None, available_at: int) -> None: ...


# --- tenants -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class TenantRow:
    name: str
    settings: dict[str, Any]
    bucket_tokens: float | None
    bucket_at_ms: int | None
    created_at: str


class TenantsTx(Protocol):
    def tenant(self, name: str) -> TenantRow | None: ...
    def tenants(self) -> list[TenantRow]: ...
    def insert_tenant(self, name: str, settings: dict[str, Any], created_at: str) -> None: ...
    def update_tenant_settings(self, name: str, settings: dict[str, Any]) -> None: ...
    def update_tenant_bucket(self, name: str, tokens: float, at_ms: int) -> None: ...


# --- principals: users, sessions, login counters ------------------------------------------------
@dataclass(frozen=True)
class UserRow:
    tenant: str
    name: str
    roles: tuple[str, ...]
    groups: tuple[str, ...]
    key_hash: str | None
    password_hash: str | None
    disabled: bool
    created_at: str
    email: str | None = None
    # Goes up with every credential change (password, API key, disable); sessions record it.
    generation: int = 0


class PrincipalsTx(Protocol):
    def user(self, tenant: str, name: str) -> UserRow | None: ...
    def user_by_key(self, key_hash: str) -> UserRow | None: ...
    def users(self, tenant: str) -> list[UserRow]: ...
    def tenant_users(self, tenant: str) -> list[UserRow]: ...
    def insert_user(self, u: UserRow) -> None: ...
    def update_user(self, u: UserRow) -> None: ...
    def end_sessions(self, tenant: str, name: str) -> int | None:
        """Raise the user's credential generation (ending every session opened before) and delete their
        sessions; the new generation, or None without such a user. On a backend with row locks the user
        row stays locked to the end of the transaction, so reads after it see the latest row."""
        ...

    def insert_session(
        self,
        id_hash: str,
        tenant: str,
        user: str,
        csrf: str,
        created_ms: int,
        expires_ms: int,
        generation: int,
    ) -> None: ...
    def session(self, id_hash: str) -> tuple[str, str, str, int, int] | None:
        """(tenant, user, csrf token, expires_ms, credential generation it was opened with)."""
        ...

    def delete_session(self, id_hash: str, now_ms: int) -> None: ...
    def login_counters(self, keys: Sequence[str], now_ms: int) -> dict[str, LoginCounter]:
        """Delete the counters expired by `now_ms`, then return those of `keys` (fresh ones for keys
        without one), locked to the end of the transaction where the backend has row locks: two
        transactions counting the same key run one after the other."""
        ...

    def save_login_counter(self, counter: LoginCounter, expires_ms: int) -> None:
        """Store a counter returned by login_counters in this transaction."""
        ...

    def delete_login_counter(self, key: str) -> None: ...


# --- audit and metrics -------------------------------------------------------------------------
@dataclass(frozen=True)
class AuditFilter:
    """What a reader of the audit log asks for; None means any. `action_prefix` matches every action
    that starts with it; `since` (inclusive) and `until` (exclusive) are timestamps as core.timeutil.iso
    writes them."""

    actor: str | None = None
    action: str | None = None
    action_prefix: str | None = None
    outcome: str | None = None
    since: str | None = None
    until: str | None = None


class AuditTx(Protocol):
    def audit(
        self,
        at: str,
        tenant: str | None,
        actor: str | None,
        action: str,
        target: str | None,
        outcome: str,
        detail: dict[str, Any],
    ) -> None: ...
    def audit_page(
        self, tenant: str | None, where: AuditFilter, before: int | None, limit: int
    ) -> list[StoredAudit]:
        """Up to `limit` rows of `tenant` (None: the rows without a tenant) matching `where`, newest
        first, with ids below `before` (None: from the newest)."""
        ...

    def audit_snapshot(self) -> None:
        """Make every later read of this (read) transaction see one snapshot; call it first."""
        ...

    def audit_heads(self) -> list[AuditHead]: ...
    def audit_head(self, chain: str) -> AuditHead | None: ...
    def audit_chains_with_rows(self) -> list[str]:
        """The chains that have rows (core.auditchain.chain_of of their tenants), whatever the heads say."""
        ...

    def audit_chain_rows(self, chain: str, after: int, limit: int) -> list[StoredAudit]:
        """Up to `limit` rows of `chain` with ids above `after`, in id order."""
        ...


class MetricsTx(Protocol):
    def stats(self, now_ms: int) -> dict[str, Any]: ...


# --- the transaction and the store -------------------------------------------------------------
class Tx(
    TxControl,
    DefinitionsTx,
    RunsTx,
    WorkTx,
    SchedulerTx,
    ApprovalsTx,
    NotificationsTx,
    TenantsTx,
    PrincipalsTx,
    AuditTx,
    MetricsTx,
    Protocol,
):
    """Operations inside one transaction: every aggregate's."""


class Store(Protocol):
    url: str

    def write(self) -> AbstractContextManager[Tx]: ...
    def read(self) -> AbstractContextManager[Tx]: ...
    def upgrade(self) -> list[str]: ...
    def close(self) -> None: ...
    def listen(self, channels: Sequence[str], on_notify: Callable[[], None], stop: threading.Event) -> None:
        """Call on_notify for every wake-up hint on `channels` until `stop` is set (run it in a thread);
        never raises. A backend without notifications returns at once: polling alone is correct."""
        ...

    def ensure_partitions(self) -> None:
        """Create the coming months' event partitions (idempotent); a no-op without partitions."""
        ...
