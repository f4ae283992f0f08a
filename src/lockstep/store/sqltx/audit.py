"""AuditTx in SQL: the audit log (who did what to which target, and the outcome), hash-chained per tenant.

Appending locks the chain's head row (`audit_chain_lock`, an upsert: PostgreSQL row lock; SQLite writers
are serialised anyway), so one writer per chain at a time computes the next link and a chain's ids grow
in commit order. The head lock is the last lock an audited transaction takes, and nothing that holds it
waits for another row, so it cannot close a deadlock cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...core.auditchain import GENESIS, AuditHead, StoredAudit, audit_hash, chain_of, secret_in_detail
from ...core.canonical import JSONObject, canonical_json, parse_json
from ..port import AuditFilter
from .base import SqlBase

__all__ = ["SqlAuditTx"]

_PAGE = 1000  # rows per read when the upgrade chains old rows


def _stored(r: Sequence[Any]) -> StoredAudit:
    return StoredAudit(int(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], parse_json(r[7]), r[8], r[9], r[10])


DEFAULT_TENANT = "default"  # app/principals/accounts.py: the tenant that exists before anyone creates it


class SqlAuditTx(SqlBase):
    def audit(
        self,
        at: str,
        tenant: str | None,
        actor: str | None,
        action: str,
        target: str | None,
        outcome: str,
        detail: JSONObject,
    ) -> None:
        why = secret_in_detail(detail)
        if why is not None:
            raise ValueError(f"audit row for {action} refused: {why}")
        if tenant is not None and self._one("audit_tenant_exists", name=tenant) is None:
            if tenant == DEFAULT_TENANT:
                # The default tenant works before anyone creates it (publish, start and repairs on it
                # need no `tenants create`): its first audited action makes its row, audited as an
                # implicit create like app/principals/accounts.py does, so the action lands in its
                # own chain rather than among the rows of no tenant.
                made = self.c.execute(self.q["tenant_insert_default"], {"name": tenant, "created_at": at})
                if made.rowcount == 1:
                    self.audit(at, tenant, actor, "tenant.create", tenant, "ok", {"implicit": True})
                return self.audit(at, tenant, actor, action, target, outcome, detail)
            # A name typed at a login that is no tenant: the row goes to the chain of rows without one,
            # so made-up names neither start chains nor show up in a tenant created later.
            detail = {**detail, "tenant_given": tenant[:100]}
            tenant = None
        chain = chain_of(tenant)
        rows, previous = self._one("audit_chain_lock", chain=chain, genesis=GENESIS)
        seq = int(rows) + 1
        content = {
            "at": at,
            "tenant": tenant,
            "actor": actor,
            "action": action,
            "target": target,
            "outcome": outcome,
            "detail": detail,
        }
        h = audit_hash(previous, seq, content)
        with self.pipeline():  # one round trip on PostgreSQL: neither write needs an answer
            self.c.execute(
                self.q["audit_insert"],
                {**content, "detail": canonical_json(detail), "seq": seq, "prev_hash": previous, "hash": h},
            )
            self.c.execute(self.q["audit_chain_advance"], {"chain": chain, "seq": seq, "hash": h})

    def audit_page(
        self, tenant: str | None, where: AuditFilter, before: int | None, limit: int
    ) -> list[StoredAudit]:
        params: dict[str, Any] = {
            "tenant": tenant,
            "before": before if before is not None else 2**62,
            "limit": limit,
            "actor": where.actor,
            "action": where.action,
            "prefix_lo": where.action_prefix,
            "prefix_hi": _after_prefix(where.action_prefix) if where.action_prefix else None,
            "outcome": where.outcome,
            "since": where.since,
            "until": where.until,
        }
        query = "audit_page" if tenant is not None else "audit_page_untenanted"
        return [_stored(r) for r in self.c.execute(self.q[query], params).fetchall()]

    # --- verification ----------------------------------------------------------------------------
    def audit_snapshot(self) -> None:
        self.c.execute(self.q["audit_snapshot"])

    def audit_heads(self) -> list[AuditHead]:
        return [_head(r) for r in self.c.execute(self.q["audit_heads"]).fetchall()]

    def audit_head(self, chain: str) -> AuditHead | None:
        r = self._one("audit_head", chain=chain)
        return _head(r) if r is not None else None

    def audit_chains_with_rows(self) -> list[str]:
        return sorted(r[0] for r in self.c.execute(self.q["audit_row_tenants"]).fetchall())

    def audit_chain_rows(self, chain: str, after: int, limit: int) -> list[StoredAudit]:
        if chain:
            rows = self.c.execute(
                self.q["audit_chain_rows"], {"tenant": chain, "after": after, "limit": limit}
            )
        else:
            rows = self.c.execute(self.q["audit_chain_rows_untenanted"], {"after": after, "limit": limit})
        return [_stored(r) for r in rows.fetchall()]

    # --- the upgrade that introduced the chain -----------------------------------------------------
    def chain_legacy_audit(self) -> int:
        """Chain the rows written before the audit_chain migration, per chain in id order, as they are
        now (run once, by the upgrade, in the migration's transaction). Returns how many were chained."""
        heads: dict[str, tuple[int, int | None, str]] = {}
        after, done = 0, 0
        while True:
            page = [
                _stored(r)
                for r in self.c.execute(
                    self.q["audit_unchained"], {"after": after, "limit": _PAGE}
                ).fetchall()
            ]
            if not page:
                break
            updates = []
            for row in page:
                chain = chain_of(row.tenant)
                rows, _last, previous = heads.get(chain, (0, None, GENESIS))
                h = audit_hash(previous, rows + 1, row.content())
                updates.append({"id": row.id, "seq": rows + 1, "prev_hash": previous, "hash": h})
                heads[chain] = (rows + 1, row.id, h)
            self.c.cursor().executemany(self.q["audit_chain_legacy"], updates)
            done += len(page)
            after = page[-1].id
        for chain, (rows, last_id, last_hash) in heads.items():
            self.c.execute(
                self.q["audit_chain_set_head"],
                {"chain": chain, "rows": rows, "last_id": last_id, "last_hash": last_hash},
            )
        return done


def _head(r: Sequence[Any]) -> AuditHead:
    return AuditHead(r[0], int(r[1]), None if r[2] is None else int(r[2]), r[3])


def _after_prefix(prefix: str) -> str:
    """The first string after every string that starts with `prefix` (for a range scan)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)
