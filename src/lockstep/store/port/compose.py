"""The transaction and the store: `Tx`, every aggregate's operations at once; the intersections of the
aggregates that callers name (the package's docstring lists which caller takes which), so mypy proves
what each feature touches; and `Store`, which opens transactions. Apart from the aggregates so each of
their modules imports only the core and, for SealTx, audit.py."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from ..retention import RetentionTx
from .approvals import ApprovalsTx
from .audit import AuditTx
from .children import ChildrenTx
from .definitions import DefinitionsTx
from .events import EventsTx
from .keys import KeysTx, Sealer, SealTx
from .metrics import MetricsTx
from .migrations import MigrationsTx
from .notifications import NotificationsTx
from .principals import PrincipalsTx
from .runs import RunsTx
from .scheduler import SchedulerTx
from .schedules import SchedulesTx
from .search import RunSearchTx
from .secrets import SecretsTx
from .tenants import TenantsTx
from .tx import TxControl
from .webhooks import WebhooksTx
from .work import WorkTx

__all__ = [
    "AccountsTx",
    "ApplyTx",
    "ApproveTx",
    "AuthTx",
    "BatchTx",
    "ChildTx",
    "ClaimTx",
    "CommandTx",
    "EventTx",
    "MigrateTx",
    "ObserveTx",
    "PublishTx",
    "QuotaTx",
    "RepairTx",
    "ScheduleTx",
    "SecretTx",
    "StartTx",
    "Store",
    "SweepTx",
    "TaskTx",
    "TimerTx",
    "Tx",
    "WebhookTx",
]


class Tx(
    TxControl,
    DefinitionsTx,
    RunsTx,
    RunSearchTx,
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
    SchedulesTx,
    ChildrenTx,
    EventsTx,
    WebhooksTx,
    SecretsTx,
    MigrationsTx,
    Protocol,
):
    """Operations inside one transaction: every aggregate's."""


# --- what the callers need: intersections of the aggregates (see the package's docstring) ---------
class ApplyTx(RunsTx, TenantsTx, SealTx, PrincipalsTx, Protocol):
    """Appending a decided command: the run, its tenant's settings (the history bound), its keys, and
    its tenant's users (who can decide an approval request it makes)."""


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


class ScheduleTx(TxControl, StartTx, SchedulesTx, AuditTx, Protocol):
    """Schedules: their rows, the runs their slots start (and cancel), the audit of every change."""


class ChildTx(StartTx, TxControl, ChildrenTx, Protocol):
    """The children pass: a child's start (a start, with its parent's sealed input opened), the row,
    the commands a row turns into on the parent (its child's end) and on the child (a cancel)."""


class EventTx(TxControl, CommandTx, EventsTx, AuditTx, Protocol):
    """External events: the inbox, the waits index and callbacks, the command on each waiting run, the
    audit row of every delivery and refusal, and the integrations' sealed secrets (SealTx)."""


class SecretTx(SecretsTx, SealTx, TenantsTx, Protocol):
    """Secrets and egress policies: their rows, the secrets' data keys (sealing, opening, destroying
    them), the tenant each belongs to, and the audit of every change and refused use."""


class RepairTx(DefinitionsTx, AuditTx, RunsTx, Protocol):
    """Operator repairs: the run's definition versions, and the audit row of each command (and the
    run's clear state, which a migration's plan checks against the target's input_schema)."""


class PublishTx(DefinitionsTx, TenantsTx, PrincipalsTx, SecretsTx, Protocol):
    """Publishing a definition within its tenant's limits (and warning of approvers it does not have,
    and of http steps whose constant URL is outside its egress policy)."""


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

    def check_files(self) -> list[str]:
        """The database's own check of its files (SQLite: integrity_check, every page); what is wrong,
        empty when sound. PostgreSQL checks its pages itself (data checksums): nothing here."""
        ...

    def database_clock_ms(self) -> int | None:
        """The database server's clock (epoch ms), or None where the database has no clock apart from
        this host's (SQLite): app/dbclock.py decides every time against it."""
        ...


class WebhookTx(TxControl, WebhooksTx, TenantsTx, SealTx, AuditTx, Protocol):
    """Run webhooks (app/webhooks.py): subscriptions, their sealed secrets, the deliveries, the audit."""


class MigrateTx(TxControl, CommandTx, MigrationsTx, AuditTx, Protocol):
    """Migrations that need approval (app/migrations/): the requests, decisions and runs, the approver's
    account, the migration command on each run, and the audit row of each step."""
