"""The storage port: what the application layer needs of a database, one small protocol per aggregate.

A `Store` opens transactions; a transaction, `Tx`, offers every aggregate's operations at once:

    TxControl        batch() and savepoint(): how several writes go together
    DefinitionsTx    published workflow definitions
    RunsTx           runs, their events and snapshots; `append` is the write path of every command
    WorkTx           tasks: the ready queue, claims, leases, heartbeats, quotas, dead letters
    SchedulerTx      timers, expired leases, scheduler partitions, the next wake-up
    ApprovalsTx      approval requests, decisions, single-use links
    NotificationsTx  the outbox of approval notifications
    ChildrenTx       the outbox between a parent run's `run` step and its child
    EventsTx         external events: the inbox, the waits index, callbacks, integration secrets
    WebhooksTx       run-webhook subscriptions and the outbox of their deliveries
    TenantsTx        tenants, their settings and rate buckets
    PrincipalsTx     users, sessions, login counters
    AuditTx          the audit log
    RetentionTx      legal holds, tombstones, the purge of finished runs past retention
    MetricsTx        aggregates for the metrics endpoint
    KeysTx           tenant data keys and run keys (wrapped: the store never sees a clear key)
    SchedulesTx      schedules (fired by the scheduler like timers) and the record of their slots
    SecretsTx        tenants' secrets (sealed versions) and egress policies (the http step)
    MigrationsTx     migrations that need approval: requests, decisions, each run's outcome

Each protocol is declared in the module of the same name here and implemented by the one in `sqltx/`
(RunsTx in `port/runs.py`, by `sqltx/runs.py`); RetentionTx lives in `store/retention.py`, the errors in
`port/errors.py`, TxControl in `port/tx.py`, SealTx and Sealer beside KeysTx in `port/keys.py`.

What each caller needs is an intersection of them, named beside `Tx` in `port/compose.py`, so mypy
proves which aggregates a feature touches (`app/port.py` hands each feature service the kernel over its
own one):

    ApplyTx     RunsTx + TenantsTx + SealTx + PrincipalsTx: appending a decided command (the tenant
                bounds the history; its users are who can decide an approval request it makes)
    BatchTx     TxControl + RunsTx: locking and loading a batch's runs in one savepoint
    CommandTx   DefinitionsTx + ApplyTx: one command on one run, with its definition version
    QuotaTx     RunsTx + TenantsTx + WorkTx + SchedulerTx: a start's tenant limits (active runs, timers)
    StartTx     CommandTx + QuotaTx: starting runs (app/runs.py)
    TaskTx      CommandTx + WorkTx: a command on the run of a task (claim, lease expiry, dead letter)
    ClaimTx     TxControl + TaskTx: claims and workers' results (app/work.py, app/reports.py)
    TimerTx     CommandTx + SchedulerTx: firing a timer
    SweepTx     TxControl + TaskTx + SchedulerTx: the scheduler's passes (app/sweeps.py)
    ChildTx     StartTx + TxControl + ChildrenTx: the children pass (app/children.py)
    WebhookTx   TxControl + WebhooksTx + SealTx + AuditTx: run webhooks (app/webhooks.py)
    PublishTx   DefinitionsTx + TenantsTx + PrincipalsTx: publishing (app/definitions.py)
    ObserveTx   DefinitionsTx + MetricsTx: the metrics endpoint (app/observability.py)
    ApproveTx   CommandTx + ApprovalsTx + PrincipalsTx: links and decisions (app/approvals/)
    AccountsTx  TenantsTx + PrincipalsTx + AuditTx: tenants and users (app/principals/accounts.py)
    AuthTx      PrincipalsTx + AuditTx: logins, API keys, sessions (app/principals/credentials.py)
    ScheduleTx  TxControl + StartTx + SchedulesTx + AuditTx: schedules (app/schedules/)
    SecretTx    SecretsTx + SealTx + TenantsTx: secrets and egress policies (app/secrets.py)
    MigrateTx   TxControl + CommandTx + MigrationsTx + AuditTx: migrations that need
                approval (app/migrations/)

One write transaction per command: load the run, decide, then `append` the events with the expected
sequence, the new snapshot and the outbox effects. A lost race raises ConcurrencyError (retry it).
"""

from __future__ import annotations

from ..retention import EventPartition, HoldRow, RetentionTx, TombstoneRow
from .approvals import ApprovalRequestRow, ApprovalsTx, DecisionRow, LinkRow, NewLink
from .audit import AuditFilter, AuditRow, AuditTx
from .children import ChildrenTx, ChildRow
from .compose import (
    AccountsTx,
    ApplyTx,
    ApproveTx,
    AuthTx,
    BatchTx,
    ChildTx,
    ClaimTx,
    CommandTx,
    EventTx,
    MigrateTx,
    ObserveTx,
    PublishTx,
    QuotaTx,
    RepairTx,
    ScheduleTx,
    SecretTx,
    StartTx,
    Store,
    SweepTx,
    TaskTx,
    TimerTx,
    Tx,
    WebhookTx,
)
from .definitions import DefinitionRow, DefinitionsTx, DefinitionVersionRow
from .errors import ConcurrencyError, CorruptRow, RowLocked, SchemaError, StoreUnavailable
from .events import CallbackRow, EventsTx, InboxRow, WaitRow
from .keys import KeysTx, RunKeyRow, Sealer, SealTx, TenantKeyRow
from .metrics import MetricsTx, StoreStats
from .migrations import MigrationDecisionRow, MigrationRequestRow, MigrationRunRow, MigrationsTx
from .notifications import NotificationRow, NotificationsTx
from .principals import PrincipalsTx, UserRow
from .runs import DamagedRun, LoadedRun, RunsTx
from .scheduler import DueTimer, ExpiredLease, SchedulerTx
from .schedules import ScheduleRow, SchedulesTx, SlotRow
from .secrets import EgressRow, SecretRow, SecretsTx
from .tenants import TenantRow, TenantsTx
from .tx import TxControl
from .webhooks import DeliveryRow, DueDelivery, SubscriptionRow, WebhooksTx
from .work import DeadTaskRow, TaskRow, WorkTx

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
    "CallbackRow",
    "ChildRow",
    "ChildTx",
    "ChildrenTx",
    "ClaimTx",
    "CommandTx",
    "ConcurrencyError",
    "CorruptRow",
    "DamagedRun",
    "DeadTaskRow",
    "DecisionRow",
    "DefinitionRow",
    "DefinitionVersionRow",
    "DefinitionsTx",
    "DeliveryRow",
    "DueDelivery",
    "DueTimer",
    "EgressRow",
    "EventPartition",
    "EventTx",
    "EventsTx",
    "ExpiredLease",
    "HoldRow",
    "InboxRow",
    "KeysTx",
    "LinkRow",
    "LoadedRun",
    "MetricsTx",
    "MigrateTx",
    "MigrationDecisionRow",
    "MigrationRequestRow",
    "MigrationRunRow",
    "MigrationsTx",
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
    "ScheduleRow",
    "ScheduleTx",
    "SchedulerTx",
    "SchedulesTx",
    "SchemaError",
    "SealTx",
    "Sealer",
    "SecretRow",
    "SecretTx",
    "SecretsTx",
    "SlotRow",
    "StartTx",
    "Store",
    "StoreStats",
    "StoreUnavailable",
    "SubscriptionRow",
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
    "WaitRow",
    "WebhookTx",
    "WebhooksTx",
    "WorkTx",
]
