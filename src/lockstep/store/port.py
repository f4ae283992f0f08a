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
    RetentionTx      legal holds, tombstones, the purge of finished runs past retention
    MetricsTx        aggregates for the metrics endpoint
    KeysTx           tenant data keys and run keys (wrapped: the store never sees a clear key)

Each protocol is implemented by the module of the same name in `sqltx/` (RunsTx by `sqltx/runs.py`).

What each caller needs is an intersection of them, named below `Tx`, so mypy proves which aggregates a
feature touches (`app/port.py` hands each feature service the kernel over its own one):

    ApplyTx     RunsTx + TenantsTx: appending a decided command (the tenant bounds the history)
    BatchTx     TxControl + RunsTx: locking and loading a batch's runs in one savepoint
    CommandTx   DefinitionsTx + ApplyTx: one command on one run, with its definition version
    QuotaTx     RunsTx + TenantsTx + WorkTx + SchedulerTx: a start's tenant limits (active runs, timers)
    StartTx     CommandTx + QuotaTx: starting runs (app/runs.py)
    TaskTx      CommandTx + WorkTx: a command on the run of a task (claim, lease expiry, dead letter)
    ClaimTx     TxControl + TaskTx: claims and workers' results (app/work.py, app/reports.py)
    TimerTx     CommandTx + SchedulerTx: firing a timer
    SweepTx     TxControl + TaskTx + SchedulerTx: the scheduler's passes (app/sweeps.py)
    PublishTx   DefinitionsTx + TenantsTx: publishing (app/definitions.py)
    ObserveTx   DefinitionsTx + MetricsTx: the metrics endpoint (app/observability.py)
    ApproveTx   CommandTx + ApprovalsTx + PrincipalsTx: links and decisions (app/approvals/)
    AccountsTx  TenantsTx + PrincipalsTx + AuditTx: tenants and users (app/principals/accounts.py)
    AuthTx      PrincipalsTx + AuditTx: logins, API keys, sessions (app/principals/credentials.py)

One write transaction per command: load the run, decide, then `append` the events with the expected
sequence, the new snapshot and the outbox effects. A lost race raises ConcurrencyError (retry it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypedDict, cast

from ..core.auditchain import AuditHead, StoredAudit
from ..core.canonical import JSONObject, JSONValue
from ..core.effects import Effect
from ..core.events import Event
from ..core.limits import Settings
from ..core.state import RunState
from ..core.throttle import LoginCounter
from .retention import EventPartition, HoldRow, RetentionTx, TombstoneRow

__all__ = [
    "AccountsTx",
    "ApplyTx",
    "ApprovalRequestRow",
    "ApprovalsTx",
    "ApproveTx",
    "AuditFilter",
    "AuditRow",
    "AuditTx",
    "AuthTx",
    "BatchTx",
    "ClaimTx",
    "CommandTx",
    "ConcurrencyError",
    "DeadTaskRow",
    "DecisionRow",
    "DefinitionRow",
    "DefinitionVersionRow",
    "DefinitionsTx",
    "DueTimer",
    "EventPartition",
    "ExpiredLease",
    "HoldRow",
    "KeysTx",
    "LinkRow",
    "LoadedRun",
    "MetricsTx",
    "NewLink",
    "NotificationRow",
    "NotificationsTx",
    "ObserveTx",
    "PrincipalsTx",
    "PublishTx",
    "QuotaTx",
    "RepairTx",
    "RetentionTx",
    "RowLocked",
    "RunKeyRow",
    "RunsTx",
    "SchedulerTx",
    "SchemaError",
    "SealTx",
    "Sealer",
    "StartTx",
    "Store",
    "StoreStats",
    "StoreUnavailable",
    "SweepTx",
    "TaskRow",
    "TaskTx",
    "TenantKeyRow",
    "TenantRow",
    "TenantsTx",
    "TimerTx",
    "TombstoneRow",
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
    document: JSONObject


class DefinitionVersionRow(TypedDict):
    name: str
    version: int
    digest: str
    created_at: str


class DefinitionsTx(Protocol):
    def definition(self, tenant: str, name: str, version: int | None) -> DefinitionRow | None: ...
    def definition_by_digest(self, tenant: str, name: str, digest: str) -> DefinitionRow | None: ...
    def insert_definition(self, tenant: str, row: DefinitionRow, created_at: str) -> None: ...
    def definitions(self, tenant: str) -> list[DefinitionVersionRow]: ...


# --- runs and events ---------------------------------------------------------------------------
class LoadedRun:
    """A run as loaded for a command: `stored`, the snapshot as written (a sealed value is a marker:
    core/sealed.py), and `state`, the clear state decisions are made on: the same object when nothing is
    sealed. A sealed run's clear state is opened on first use, inside the transaction that loaded it
    (reads that only show the run, which use `stored`, never open anything)."""

    __slots__ = ("_open", "_state", "last_hash", "stored")

    def __init__(
        self,
        state: RunState | None,
        last_hash: str,
        *,
        stored: RunState | None = None,
        opener: Callable[[], RunState] | None = None,
    ) -> None:
        if state is None and (stored is None or opener is None):
            raise ValueError("a LoadedRun needs its state, or its stored state and an opener")
        self._state = state
        self.stored: RunState = cast(RunState, stored if stored is not None else state)
        self.last_hash = last_hash
        self._open = opener

    @property
    def state(self) -> RunState:
        if self._state is None:
            self._state = cast(Callable[[], RunState], self._open)()
        return self._state

    @property
    def sealed(self) -> bool:
        """Whether the stored state holds sealed values (then it is not the clear state)."""
        return self._open is not None or self.stored is not self._state


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
        clear: RunState | None = None,
    ) -> None:
        """Append `events` after `before` (or create the run), write the snapshot `after` and apply
        `effects`; an attempt leased by these events holds its lease until `lease_until_ms` (else its
        deadline). Events, `after` and effects are the stored (sealed) forms; `clear` is the clear
        state when it differs (kept in the process's state cache, never written)."""
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
    input: JSONValue
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
    # Whether the stored input may hold sealed values (a marker): then it is opened before a hand-over.
    sealed: bool = False


class DeadTaskRow(TypedDict):
    task_id: str
    run_id: str
    step: str
    attempt: int
    activity: str
    reason: str
    created_at: str


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
    def dead_tasks(self, tenant: str, limit: int) -> list[DeadTaskRow]: ...
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
class ApprovalRequestRow(TypedDict):
    """An approval request as the inboxes and the notifier read it (the run's snapshot holds the rest)."""

    request_id: str
    tenant: str
    run_id: str
    step: str
    users: list[str]
    groups: list[str]
    initiator: str | None
    allow_initiator: bool
    status: str
    expires_at: int  # epoch ms
    created_at: str


class DecisionRow(TypedDict):
    decision: str
    link_id: str | None
    at: str


class NewLink(TypedDict):
    """What a link's creator gives; status, use and decision are the store's."""

    link_id: str
    tenant: str
    run_id: str
    step: str
    request_id: str
    approver: str
    expires_at: int  # epoch ms
    created_at: str


class LinkRow(NewLink):
    status: Literal["pending", "used", "revoked"]
    used_at: str | None
    decision: str | None


class ApprovalsTx(Protocol):
    def approval_request(self, request_id: str) -> ApprovalRequestRow | None: ...
    def pending_approval_requests(self, tenant: str) -> list[ApprovalRequestRow]: ...
    def approval_decision(self, request_id: str, approver: str) -> DecisionRow | None: ...
    def insert_link(self, link: NewLink, token_hash: str) -> None: ...
    def link_by_hash(self, token_hash: str) -> LinkRow | None: ...
    def link_by_id(self, link_id: str) -> LinkRow | None: ...
    def links_of_request(self, request_id: str) -> list[LinkRow]: ...
    def consume_link(self, token_hash: str, decision: str, used_at: str) -> bool: ...
    def revoke_links(self, request_id: str, approver: str | None, link_id: str | None) -> int: ...


class NotificationRow(TypedDict):
    """One approver to tell about one request, leased by the notifier while it sends."""

    id: int
    tenant: str
    run_id: str
    request_id: str
    approver: str
    attempts: int  # this one included


class NotificationsTx(Protocol):
    def claim_notifications(self, now_ms: int, limit: int, lease_ms: int) -> list[NotificationRow]: ...
    def finish_notification(self, nid: int, status: str, error: str | None, available_at: int) -> None: ...


# --- tenants -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class TenantRow:
    name: str
    settings: Settings
    bucket_tokens: float | None
    bucket_at_ms: int | None
    created_at: str


class TenantsTx(Protocol):
    def tenant(self, name: str) -> TenantRow | None: ...
    def tenants(self) -> list[TenantRow]: ...
    def insert_tenant(self, name: str, settings: Settings, created_at: str) -> None: ...
    def update_tenant_settings(self, name: str, settings: Settings) -> None: ...
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
    # Per-user grants beyond the roles (read_sensitive: may reveal sealed values), off by default.
    grants: tuple[str, ...] = ()


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
class AuditRow(TypedDict):
    id: int
    at: str
    tenant: str | None
    actor: str | None
    action: str
    target: str | None
    outcome: str
    detail: JSONObject  # what the caller recorded


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
        detail: JSONObject,
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


class StoreStats(TypedDict):
    runs: list[tuple[str, str, int]]  # (tenant, status, runs)
    queues: list[tuple[str, str, int, int]]  # (tenant, activity, ready tasks, oldest available_at ms)
    timers: list[tuple[str, int, int]]  # (tenant, oldest fire_at ms, timers due)


class MetricsTx(Protocol):
    def stats(self, now_ms: int) -> StoreStats: ...


# --- keys: tenant data keys (wrapped by the key provider) and run keys (wrapped by a tenant key) -----
@dataclass(frozen=True)
class TenantKeyRow:
    tenant: str
    version: int
    wrapped: str  # base64 of nonce || ciphertext+tag: the provider's wrapping of the tenant's data key
    provider: str  # which key provider (and key) wrapped it, e.g. local:<fingerprint>
    created_at: str
    retired_at: str | None  # set when a newer version exists: no new run keys are wrapped under it


@dataclass(frozen=True)
class RunKeyRow:
    """A run's data key, wrapped under its tenant's key `key_version`, with that tenant key row (a
    foreign key keeps it while this row uses it); or, once the run was forgotten, no key at all."""

    run_id: str
    tenant: str
    key_version: int | None
    wrapped: str | None
    forgotten_at: str | None
    tenant_key: TenantKeyRow | None


class KeysTx(Protocol):
    def tenant_keys(self, tenant: str) -> list[TenantKeyRow]:
        """Every stored version of a tenant's data key, oldest first."""
        ...

    def insert_tenant_key(self, row: TenantKeyRow) -> bool:
        """Add a version; False (nothing written) if that version exists already."""
        ...

    def retire_tenant_keys(self, tenant: str, below: int, at: str) -> None: ...
    def delete_tenant_key(self, tenant: str, version: int) -> bool:
        """Delete a retired version no run key is wrapped under any more; False if one still is."""
        ...

    def run_key(self, run_id: str) -> RunKeyRow | None:
        """The run's key row (read once per transaction)."""
        ...

    def remember_run_keys(self, run_ids: Sequence[str]) -> None:
        """Read several runs' key rows now, with one query, for the run_key calls that follow."""
        ...

    def insert_run_key(self, run_id: str, tenant: str, key_version: int, wrapped: str) -> None:
        """Store a run's key (ConcurrencyError if the run has one, or its tenant key version is gone)."""
        ...

    def forget_run_key(self, run_id: str, tenant: str, at: str) -> None:
        """Destroy a run's key, keeping a row that says it was forgotten (so none is made again)."""
        ...

    def forget_tenant_run_keys(self, tenant: str, at: str) -> int: ...
    def delete_all_tenant_keys(self, tenant: str) -> int:
        """Delete every version of a tenant's key (after forget_tenant_run_keys: none is in use)."""
        ...

    def rotating_tenants(self) -> list[tuple[str, int]]:
        """(tenant, newest version) of each tenant with more than one version of its key."""
        ...

    def stale_run_keys(self, limit: int) -> list[RunKeyRow]:
        """Run keys wrapped under a version older than their tenant's newest (locked, skipping rows
        another transaction holds, where the backend has row locks): what a re-wrap pass works on."""
        ...

    def rewrap_run_key(self, run_id: str, old_version: int, new_version: int, wrapped: str) -> bool: ...
    def run_key_counts(self, tenant: str) -> dict[int, int]:
        """How many run keys are wrapped under each version of the tenant's key."""
        ...

    def forgotten_run_keys(self, tenant: str) -> int: ...


class SealTx(KeysTx, AuditTx, Protocol):
    """Sealing and opening: the run keys, and the audit of a tenant key created on first use."""


class Sealer(Protocol):
    """Seals and opens a run's sensitive values (implemented by the application layer's key ring: the
    store holds only wrapped keys, and calls `open` to give a command the clear state and a worker its
    clear input)."""

    def seal(
        self, tx: SealTx, tenant: str, run_id: str, values: Sequence[tuple[str, Any]], *, new: bool = False
    ) -> list[dict[str, str]]:
        """One marker per (label, clear value), under the run's data key (created with the first; a
        `new` run, being created in this transaction, has none yet)."""
        ...

    def open(self, tx: SealTx, tenant: str, run_id: str, value: Any) -> Any:
        """`value` with every marker of the run replaced by its clear value."""
        ...


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
    RetentionTx,
    KeysTx,
    Protocol,
):
    """Operations inside one transaction: every aggregate's."""


# --- what the callers need: intersections of the aggregates (see the module's docstring) ---------
class ApplyTx(RunsTx, TenantsTx, SealTx, Protocol):
    """Appending a decided command: the run, its tenant's settings (the history bound), its keys."""


class BatchTx(TxControl, RunsTx, Protocol):
    """Locking and loading a batch's runs with one query, in a savepoint, with batched appends."""


class CommandTx(DefinitionsTx, ApplyTx, RetentionTx, Protocol):
    """One command on one run: load it, compile its definition version, decide, append (or say that
    the run was purged, from its tombstone)."""


class QuotaTx(RunsTx, TenantsTx, WorkTx, SchedulerTx, Protocol):
    """A start's tenant limits: the tenant row (locked) and bucket, active runs, armed timers."""


class StartTx(CommandTx, QuotaTx, Protocol):
    """Starting runs: the published definitions, the tenant's limits, the new run's append."""


class TaskTx(CommandTx, WorkTx, Protocol):
    """A command on the run of a task (claim, lease expiry, dead letter) and the task's row."""


class ClaimTx(TxControl, TaskTx, Protocol):
    """Claims and workers' results: tasks, their runs in batches and savepoints."""


class TimerTx(CommandTx, SchedulerTx, Protocol):
    """Firing a timer: its row and the command on its run."""


class SweepTx(TxControl, TaskTx, SchedulerTx, Protocol):
    """The scheduler's passes: timers, expired leases, unserved tasks, partitions."""


class RepairTx(DefinitionsTx, AuditTx, Protocol):
    """Operator repairs: the run's definition versions, and the audit row of each command."""


class PublishTx(DefinitionsTx, TenantsTx, Protocol):
    """Publishing a definition within its tenant's limits."""


class ObserveTx(DefinitionsTx, MetricsTx, Protocol):
    """The metrics endpoint: the database's aggregates and the definitions' declared error codes."""


class ApproveTx(CommandTx, ApprovalsTx, PrincipalsTx, Protocol):
    """Approval links and decisions: the run's command, the links, the approver's account."""


class AccountsTx(TenantsTx, PrincipalsTx, AuditTx, Protocol):
    """Tenants and users, and the audit log of what was done to them."""


class AuthTx(PrincipalsTx, AuditTx, Protocol):
    """Logins (throttled, audited), API keys and sessions."""


class Store(Protocol):
    url: str
    # Opens sealed values on load (set by the application layer; None: this process seals nothing).
    sealer: Sealer | None

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
