"""The backend-neutral half of the SQL adapters: one transaction's operations over named queries.

`SqlTx` is one mixin per aggregate of the port (see `store/port/`) over a shared base:

    base.py           the connection, named queries, buffered writes, batch() and savepoint()
    definitions.py    DefinitionsTx
    runs.py           RunsTx: load, append (events, run row, and the outbox rows of its effects), list
    work.py           WorkTx: tasks, claims, leases, quotas, dead letters
    scheduler.py      SchedulerTx: timers, expired leases, partitions, the next wake-up
    approvals.py      ApprovalsTx: requests, decisions, links
    notifications.py  NotificationsTx: the approval-notification outbox
    tenants.py        TenantsTx
    principals.py     PrincipalsTx: users, sessions, login counters
    audit.py          AuditTx
    retention.py      RetentionTx: legal holds, tombstones, the purge's reads and deletes
    keys.py           KeysTx: tenant data keys and run keys (wrapped)
    schedules.py      SchedulesTx: schedule rows and the record of their slots
    secrets.py        SecretsTx: secret versions (sealed) and egress policies
    metrics.py        MetricsTx
    migrations.py     MigrationsTx: migration requests, their decisions and runs

A backend (`sqlite/adapter.py`, `postgres/adapter.py`) subclasses SqlTx with its connection, its own
`queries.sql` (the same query names in its dialect) and what its database does differently.
"""

from __future__ import annotations

from .approvals import SqlApprovalsTx
from .audit import SqlAuditTx
from .base import GENESIS, ms_of
from .definitions import SqlDefinitionsTx
from .keys import SqlKeysTx
from .metrics import SqlMetricsTx
from .migrations import SqlMigrationsTx
from .notifications import SqlNotificationsTx
from .principals import SqlPrincipalsTx
from .retention import SqlRetentionTx
from .runs import SqlRunsTx
from .scheduler import SqlSchedulerTx
from .schedules import SqlSchedulesTx
from .search import SqlRunSearchTx
from .secrets import SqlSecretsTx
from .tenants import SqlTenantsTx
from .work import SqlWorkTx

__all__ = ["GENESIS", "SqlTx", "ms_of"]


class SqlTx(
    SqlRunSearchTx,  # builds on SqlRunsTx
    SqlRunsTx,
    SqlWorkTx,
    SqlSchedulerTx,
    SqlApprovalsTx,
    SqlNotificationsTx,
    SqlDefinitionsTx,
    SqlTenantsTx,
    SqlPrincipalsTx,
    SqlAuditTx,
    SqlMetricsTx,
    SqlRetentionTx,
    SqlKeysTx,
    SqlSchedulesTx,
    SqlSecretsTx,
    SqlMigrationsTx,
):
    """Operations inside one transaction, shared by the SQL backends: every protocol of the port's Tx.
    (SqlRunsTx already builds on work, scheduler, approvals and notifications: an append writes their
    rows; they are named here too so that this line lists every part.)"""
