"""Asking for a migration that needs approval (`migrate` of one run or a bulk batch makes one request),
reading requests back, and the approvers' inbox items of them."""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime

from ...core.canonical import JSONObject
from ...core.definition import Definition
from ...core.state import RunState
from ...core.timeutil import iso
from ...errors import Conflict, InvalidInput, NotFound
from ...store import MigrateTx, MigrationDecisionRow, MigrationRequestRow, MigrationRunRow, MigrationsTx
from ..audit import Audit
from ..port import KernelPort
from ..principals import Principal
from ..views import DefinitionRef, InboxItem, MigrationRequestView, MigrationSummary

__all__ = ["REQUEST_RE", "MigrationRequests", "is_migration_request", "iso_ms", "view_of"]

REQUEST_RE = re.compile(r"^mig_[0-9a-f]{20}$")
MAX_RUNS = 10_000  # runs in one request (a bulk migration's batch)


def is_migration_request(request_id: str) -> bool:
    """Whether `request_id` names a migration request (an approval step's is `<run>/<step>/r<n>`)."""
    return REQUEST_RE.match(request_id) is not None


def iso_ms(ms: int | None) -> str | None:
    return None if ms is None else iso(datetime.fromtimestamp(ms / 1000, UTC))


def view_of(
    row: MigrationRequestRow, decisions: list[MigrationDecisionRow], runs: list[MigrationRunRow]
) -> MigrationRequestView:
    p = row["policy"]
    return MigrationRequestView.model_validate(
        {
            **{k: row[k] for k in ("request_id", "status", "definition", "from_version", "to_version")},
            "mapping": row["mapping"],
            "reason": row["reason"],
            "requested_by": row["requested_by"],
            "bulk": row["bulk"],
            "approvers": {k: p[k] for k in ("users", "groups", "quorum", "reject_quorum", "version")},
            "created_at": iso_ms(row["created_at"]),
            "expires_at": iso_ms(row["expires_at"]),
            "decided_at": iso_ms(row["decided_at"]),
            "applied_at": iso_ms(row["applied_at"]),
            "decisions": decisions,
            "runs": [{"run_id": r["run_id"], "outcome": r["outcome"], "detail": r["detail"]} for r in runs],
        }
    )


class MigrationRequests:
    def __init__(self, kernel: KernelPort[MigrateTx]) -> None:
        self.kernel = kernel
        self.audit = Audit(kernel)

    def _now_ms(self) -> int:
        return int(self.kernel.clock().timestamp() * 1000)

    def ask(
        self,
        tenant: str,
        runs: list[RunState],
        target: Definition,
        to_version: int,
        policy: JSONObject,
        mapping: dict[str, str],
        reason: str,
        actor: str | None,
        *,
        bulk: bool,
    ) -> MigrationRequestView:
        """One pending request for `runs` (all of one definition version), decided under `policy`; nothing
        is migrated until it is granted. A run already in an open request is refused (409)."""
        if actor is None or not actor.strip():
            raise InvalidInput(
                "a migration that needs approval names the operator who asks (--actor / $USER)"
            )
        if not runs:
            raise InvalidInput("no run to migrate: the request would be empty")
        if len(runs) > MAX_RUNS:
            raise InvalidInput(f"{len(runs)} runs exceed the {MAX_RUNS} one migration request may hold")
        first = runs[0].definition
        now = self._now_ms()
        row: MigrationRequestRow = {
            "request_id": "mig_" + secrets.token_hex(10),
            "tenant": tenant,
            "definition": first["name"],
            "from_version": int(first["version"]),
            "to_version": to_version,
            "mapping": dict(mapping),
            "reason": reason,
            "requested_by": actor,
            "policy": policy,
            "bulk": bulk,
            "status": "pending",
            "created_at": now,
            "expires_at": now + int(policy["timeout_ms"]),
            "decided_at": None,
            "applied_at": None,
        }
        rid = row["request_id"]
        with self.kernel.write() as tx:
            tx.insert_migration_request(row)
            for s in runs:
                if not tx.add_migration_run(rid, s.run_id, tenant):
                    other = tx.open_migration_of(s.run_id)
                    raise Conflict(
                        f"run {s.run_id} already waits for migration request {other}: let it be decided "
                        f"(or expire) first",
                        code="migration_pending",
                    )
            self.audit.record(
                tenant,
                actor,
                "migration.request",
                rid,
                "ok",
                tx=tx,
                runs=[s.run_id for s in runs][:50],
                count=len(runs),
                definition=row["definition"],
                from_version=row["from_version"],
                to_version=to_version,
                reason=reason,
            )
            return self._view(tx, row)

    def _view(self, tx: MigrationsTx, row: MigrationRequestRow) -> MigrationRequestView:
        rid = row["request_id"]
        return view_of(row, tx.migration_decisions(rid), tx.migration_runs(rid))

    def open_request_of(self, run_id: str) -> str | None:
        """The open (pending or approved) request run `run_id` is in, if any."""
        with self.kernel.read() as tx:
            return tx.open_migration_of(run_id)

    def request(self, tenant: str, request_id: str) -> MigrationRequestView:
        """One request of `tenant` (404 for another tenant's, or an unknown id)."""
        with self.kernel.read() as tx:
            row = tx.migration_request(tenant, request_id[:100])
            if row is None:
                raise NotFound(
                    f"no migration request {request_id[:100]!r} in tenant {tenant}", code="unknown_request"
                )
            return self._view(tx, row)

    def requests(
        self, tenant: str, status: str | None = None, limit: int = 100
    ) -> list[MigrationRequestView]:
        if status is not None and status not in ("pending", "approved", "applied", "rejected", "expired"):
            raise InvalidInput(
                f"status {status!r}: use pending, approved, applied, rejected or expired", code="bad_filter"
            )
        with self.kernel.read() as tx:
            return [self._view(tx, r) for r in tx.migration_requests(tenant, status, max(1, min(limit, 500)))]

    def inbox(self, principal: Principal) -> list[InboxItem]:
        """The pending migration requests `principal` may decide and has not decided: named or in a named
        group, never the operator who asked, unexpired."""
        if not principal.can("approve"):
            return []
        now = self._now_ms()
        out = []
        with self.kernel.read() as tx:
            for row in tx.migration_requests(principal.tenant, "pending", 500):
                p = row["policy"]
                if row["expires_at"] <= now or row["requested_by"] == principal.name:
                    continue
                if principal.name not in p["users"] and not set(principal.groups) & set(p["groups"]):
                    continue
                decisions = tx.migration_decisions(row["request_id"])
                if any(d["approver"] == principal.name for d in decisions):
                    continue
                runs = [r["run_id"] for r in tx.migration_runs(row["request_id"])]
                d = self.kernel.definition_for(tx, principal.tenant, row["definition"], row["from_version"])
                out.append(_item(row, decisions, runs, d.digest))
        return out


def _item(
    row: MigrationRequestRow, decisions: list[MigrationDecisionRow], runs: list[str], digest: str
) -> InboxItem:
    what = f"run {runs[0]}" if len(runs) == 1 else f"{len(runs)} runs"
    summary = MigrationSummary(
        request_id=row["request_id"],
        runs=runs,
        definition=row["definition"],
        from_version=row["from_version"],
        to_version=row["to_version"],
        mapping=row["mapping"],
        reason=row["reason"],
        requested_by=row["requested_by"],
        bulk=row["bulk"],
    )
    return InboxItem.model_validate(
        {
            "request_id": row["request_id"],
            "run_id": runs[0] if runs else "",
            "step": "",
            "definition": DefinitionRef.model_validate(
                {"name": row["definition"], "version": row["from_version"], "digest": digest}
            ),
            "details": f"Migrate {what} of {row['definition']} from version {row['from_version']} to "
            f"{row['to_version']} (asked by {row['requested_by']}: {row['reason']})",
            "quorum": row["policy"]["quorum"],
            "decisions": [{**d, "link_id": None} for d in decisions],
            "requested_at": iso_ms(row["created_at"]),
            "expires_at": iso_ms(row["expires_at"]),
            "form": None,
            "kind": "migration",
            "migration": summary,
        }
    )
