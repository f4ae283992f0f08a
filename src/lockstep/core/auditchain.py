"""The audit log's hash chains (pure): how a row is hashed, and how a chain is checked row by row.

One chain per tenant, plus one for the rows without a tenant (`chain_of(None)`: refused logins naming no
existing tenant, API keys that match nobody). A row's hash is sha256 over the previous row's hash and the
canonical JSON of the row's content, its chain and its position `seq` (1, 2, ... per chain); the first
row's previous hash is GENESIS. The chain's head (its row count, last id and last hash) is kept beside the
rows, so removing rows from the end is seen too. `ChainCheck` is fed a chain's stored rows in id order and
names every row that was changed, deleted or inserted, without holding the chain in memory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .canonical import canonical_json

__all__ = [
    "GENESIS",
    "SECRET_KEYS",
    "AuditHead",
    "ChainCheck",
    "StoredAudit",
    "audit_hash",
    "chain_of",
    "secret_in_detail",
]

GENESIS = "0" * 64
# Keys a detail may never have: what they would hold is a credential (docs/security.md, Audit log).
SECRET_KEYS = frozenset(
    {"password", "passphrase", "api_key", "token", "secret", "cookie", "csrf", "authorization"}
)
# The prefix of every lockstep API key (app/principals.py): a value starting with it is a key.
_KEY_PREFIX = "lsk_"


def chain_of(tenant: str | None) -> str:
    """The chain a row belongs to: its tenant, or '' for rows without one (no tenant is named '')."""
    return tenant or ""


def audit_hash(previous: str, seq: int, row: Mapping[str, Any]) -> str:
    """sha256 over the previous hash and the canonical JSON of the row's content and place (`row` has at,
    tenant, actor, action, target, outcome and detail, the detail as a dict)."""
    body = canonical_json(
        {
            "seq": seq,
            "at": row["at"],
            "tenant": row["tenant"],
            "actor": row["actor"],
            "action": row["action"],
            "target": row["target"],
            "outcome": row["outcome"],
            "detail": row["detail"],
        }
    )
    return hashlib.sha256((previous + "\n" + body).encode()).hexdigest()


def secret_in_detail(detail: Mapping[str, Any]) -> str | None:
    """Why `detail` may not be written to the audit log (a key that names a credential, or a value that
    is an API key), else None. A guard against a caller's mistake, not a scanner for every secret."""
    for k, v in detail.items():
        if k.lower() in SECRET_KEYS:
            return f"detail key {k!r} names a credential; record a hash prefix or an id instead"
        if isinstance(v, str) and v.startswith(_KEY_PREFIX):
            return f"detail {k!r} holds an API key; record the user instead"
    return None


@dataclass(frozen=True)
class StoredAudit:
    """One audit row as stored (the detail parsed back from its JSON text)."""

    id: int
    at: str
    tenant: str | None
    actor: str | None
    action: str
    target: str | None
    outcome: str
    detail: dict[str, Any]
    seq: int | None
    prev_hash: str | None
    hash: str | None

    def content(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "tenant": self.tenant,
            "actor": self.actor,
            "action": self.action,
            "target": self.target,
            "outcome": self.outcome,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class AuditHead:
    """What the chain's head row records: how many rows the chain has and its last one."""

    chain: str
    rows: int
    last_id: int | None
    last_hash: str


@dataclass
class ChainCheck:
    """Checks one chain fed row by row in id order; `problems` are (row id or None, sentence)."""

    chain: str
    rows: int = 0
    problems: list[tuple[int | None, str]] = field(default_factory=list)
    _hash: str = GENESIS
    _seq: int = 0
    _last_id: int | None = None

    def _where(self) -> str:
        return f"tenant {self.chain}" if self.chain else "no tenant"

    def feed(self, row: StoredAudit) -> None:
        self.rows += 1
        where = self._where()
        if row.hash is None or row.prev_hash is None or row.seq is None:
            self.problems.append(
                (row.id, f"audit row {row.id} ({where}) has no hash: it was written outside lockstep")
            )
            self._last_id = row.id
            return
        if row.seq > self._seq + 1:
            missing = (
                f"seq {self._seq + 1}" if row.seq == self._seq + 2 else f"seq {self._seq + 1}-{row.seq - 1}"
            )
            after = f"after row {self._last_id}" if self._last_id is not None else "at the start"
            self.problems.append(
                (row.id, f"audit row(s) {missing} ({where}) {after} and before row {row.id} were deleted")
            )
        elif row.seq <= self._seq:
            self.problems.append(
                (row.id, f"audit row {row.id} ({where}) repeats seq {row.seq}: it was inserted")
            )
        elif row.prev_hash != self._hash:
            before = f"row {self._last_id}" if self._last_id is not None else "the start of the chain"
            self.problems.append(
                (
                    row.id,
                    f"audit row {row.id} ({where}) does not follow {before}: a row between was "
                    "replaced, or it was inserted",
                )
            )
        if audit_hash(row.prev_hash, row.seq, row.content()) != row.hash:
            self.problems.append(
                (row.id, f"audit row {row.id} ({where}) was changed: its content does not match its hash")
            )
        # Go on from what is stored, so one edit is reported once, not at every later row.
        self._hash, self._seq, self._last_id = row.hash, max(self._seq, row.seq), row.id

    def finish(self, head: AuditHead | None) -> None:
        """Compare the end of the chain with its head (None: no head row for this chain)."""
        where = self._where()
        if head is None:
            if self.rows:
                self.problems.append((None, f"the audit chain of {where} has rows but no head row"))
            return
        if head.rows != self._seq or head.last_hash != self._hash:
            last = f"row {self._last_id} (seq {self._seq})" if self._last_id is not None else "no row"
            self.problems.append(
                (
                    head.last_id,
                    f"the audit chain of {where} ends at {last} but its head records {head.rows} row(s) "
                    f"ending at row {head.last_id}: rows at the end were deleted, or the head was changed",
                )
            )
