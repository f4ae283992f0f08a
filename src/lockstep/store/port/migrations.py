"""The migration-requests aggregate: migrations that need approval (implemented by sqltx/migrations.py).
A request names its runs (one, or a bulk batch), records the policy it is decided under and the
approvers' decisions (one per approver: the primary key), and, per run, the outcome of applying it,
written in the transaction of that run's migration command so the apply pass is idempotent."""

from __future__ import annotations

from typing import Any, Protocol, TypedDict

__all__ = ["MigrationDecisionRow", "MigrationRequestRow", "MigrationRunRow", "MigrationsTx"]


class MigrationRequestRow(TypedDict):
    request_id: str
    tenant: str
    definition: str
    from_version: int
    to_version: int
    mapping: dict[str, str]
    reason: str
    requested_by: str
    policy: dict[str, Any]
    bulk: bool
    status: str  # pending | approved | applied | rejected | expired
    created_at: int  # epoch ms
    expires_at: int
    decided_at: int | None
    applied_at: int | None


class MigrationRunRow(TypedDict):
    request_id: str
    run_id: str
    outcome: str | None  # None (open) | migrated | skipped | rejected | expired
    detail: str | None
    at: int | None


class MigrationDecisionRow(TypedDict):
    approver: str
    decision: str
    comment: str | None
    at: str
    roles: list[str]
    groups: list[str]


class MigrationsTx(Protocol):
    def insert_migration_request(self, row: MigrationRequestRow) -> None: ...
    def add_migration_run(self, request_id: str, run_id: str, tenant: str) -> bool:
        """False when the run is in another open request already (nothing written)."""
        ...

    def open_migration_of(self, run_id: str) -> str | None: ...
    def migration_request(
        self, tenant: str, request_id: str, *, lock: bool = False
    ) -> MigrationRequestRow | None: ...
    def migration_requests(
        self, tenant: str, status: str | None, limit: int
    ) -> list[MigrationRequestRow]: ...
    def migration_runs(self, request_id: str) -> list[MigrationRunRow]: ...
    def lock_migration_run(self, request_id: str, run_id: str) -> MigrationRunRow | None: ...
    def set_migration_outcome(
        self, request_id: str, run_id: str, outcome: str, detail: str | None, now_ms: int
    ) -> bool: ...
    def close_migration_runs(self, request_id: str, outcome: str, now_ms: int) -> None: ...
    def migration_decisions(self, request_id: str) -> list[MigrationDecisionRow]: ...
    def insert_migration_decision(self, request_id: str, row: MigrationDecisionRow) -> bool: ...
    def set_migration_status(
        self,
        request_id: str,
        status: str,
        from_status: str,
        *,
        decided_at: int | None = None,
        applied_at: int | None = None,
    ) -> bool: ...
    def due_migration_requests(self, now_ms: int, limit: int) -> list[tuple[str, str]]: ...
