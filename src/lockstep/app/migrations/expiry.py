"""Expiry of a migration request: past its time undecided, it expires and nothing is migrated (on a
decision that comes too late, or in the scheduler's pass, whichever is first)."""

from __future__ import annotations

from ...store import MigrateTx, MigrationRequestRow
from ..audit import Audit

__all__ = ["expire"]


def expire(tx: MigrateTx, audit: Audit, row: MigrationRequestRow, now_ms: int, actor: str | None) -> bool:
    """Mark a pending request past its expiry expired (nothing is migrated), in `tx`, audited."""
    rid = row["request_id"]
    if not tx.set_migration_status(rid, "expired", "pending", decided_at=now_ms):
        return False
    tx.close_migration_runs(rid, "expired", now_ms)
    audit.record(row["tenant"], actor, "migration.expire", rid, "ok", tx=tx, expired_at=row["expires_at"])
    return True
