"""An approver's decision on a migration request, by its id (`POST /v1/approvals/{request_id}/decide`,
the UI inbox): the checks of an approval request's decision. The request and the approver are read again
in the decision's transaction (enabled, the approver role, named or in a named group now), one decision
each (the primary key), never the operator who asked (core/migapproval.py), another tenant's request
404, past its expiry 410 (and marked expired), closed 409. Every attempt is audited."""

from __future__ import annotations

import logging

from ...core.commands import Rejected
from ...core.migapproval import decide_request
from ...core.timeutil import iso
from ...errors import Conflict, Forbidden, Gone, InvalidInput, LockstepError, NotFound
from ...store import MigrateTx, MigrationDecisionRow
from .. import failpoints
from ..audit import Audit
from ..port import KernelPort
from ..principals import Principal
from ..views import MigrationRequestView
from .apply import MigrationApply
from .expiry import expire
from .requests import MigrationRequests, is_migration_request

__all__ = ["MigrationDecisions"]

log = logging.getLogger("lockstep.migrations")


class MigrationDecisions:
    def __init__(
        self, kernel: KernelPort[MigrateTx], requests: MigrationRequests, apply: MigrationApply
    ) -> None:
        self.kernel = kernel
        self.requests = requests
        self.applier = apply
        self.audit = Audit(kernel)

    def decide(
        self,
        principal: Principal,
        request_id: str,
        decision: str,
        comment: str | None = None,
        *,
        channel: str = "api",
    ) -> MigrationRequestView:
        """Record one decision; when it grants the request, migrate its runs now (the scheduler's pass
        finishes what a crash in between leaves: the approval is committed first)."""
        rid = request_id[:100]
        try:
            if decision not in ("approve", "reject"):
                raise InvalidInput(f"decision must be approve or reject, not {decision!r}")
            if not is_migration_request(rid):
                raise NotFound(f"unknown migration request {rid!r}", code="unknown_request")
            status = self._decide(principal, rid, decision, comment)
        except LockstepError as exc:
            self.audit.refused(
                principal.tenant,
                principal.name,
                "migration.decide",
                rid,
                exc.code,
                channel=channel,
                decision=decision,
            )
            raise
        self.audit.record(
            principal.tenant,
            principal.name,
            "migration.decide",
            rid,
            "ok",
            channel=channel,
            decision=decision,
        )
        if status == "approved":
            failpoints.hit("migration.approved", request=rid)  # granted and committed, not applied yet
            try:
                self.applier.apply(principal.tenant, rid)
            except LockstepError as exc:  # the database went away: the scheduler's pass applies it
                log.warning(
                    "migration request %s granted; applying it failed (%s), the pass retries", rid, exc
                )
        return self.requests.request(principal.tenant, rid)

    def _decide(self, principal: Principal, rid: str, decision: str, comment: str | None) -> str:
        self.kernel.check_value(principal.tenant, comment, "max_payload_bytes", "the comment")
        now = self.kernel.clock()
        now_ms = int(now.timestamp() * 1000)
        expired = False
        with self.kernel.write() as tx:
            row = tx.migration_request(principal.tenant, rid, lock=True)
            if row is None:
                raise NotFound(
                    f"no migration request {rid!r} in tenant {principal.tenant}", code="unknown_request"
                )
            if not principal.can("approve"):
                raise Forbidden(f"{principal.name} does not have the approver role", code="not_an_approver")
            user = tx.user(principal.tenant, principal.name)
            if user is None or user.disabled:
                raise Forbidden(f"{principal.name} is disabled", code="disabled")
            decisions = tx.migration_decisions(rid)
            request = {**row, "decisions": decisions, "expires_at_ms": row["expires_at"]}
            try:
                record, status = decide_request(
                    request,
                    user.name,
                    user.roles,
                    user.groups,
                    decision,
                    (comment or "")[:2000] or None,
                    now_ms,
                    iso(now),
                )
            except Rejected as r:
                if r.code != "expired" or row["status"] != "pending":
                    raise _refusal(r) from None
                expire(tx, self.audit, row, now_ms, principal.name)
                expired = True
            if not expired:
                decided: MigrationDecisionRow = {
                    "approver": record["approver"],
                    "decision": record["decision"],
                    "comment": record["comment"],
                    "at": record["at"],
                    "roles": record["roles"],
                    "groups": record["groups"],
                }
                if not tx.insert_migration_decision(rid, decided):
                    raise Conflict(f"{user.name} already decided on {rid}", code="already_decided")
                if status != "pending":
                    tx.set_migration_status(rid, status, "pending", decided_at=now_ms)
                if status == "rejected":
                    tx.close_migration_runs(rid, "rejected", now_ms)
                    by = [d["approver"] for d in [*decisions, decided] if d["decision"] == "reject"]
                    self.audit.record(
                        principal.tenant, principal.name, "migration.reject", rid, "ok", tx=tx, rejected_by=by
                    )
        if expired:
            raise Gone(f"migration request {rid} expired before it was decided", code="expired")
        return status


def _refusal(r: Rejected) -> LockstepError:
    if r.code in ("not_an_approver", "requester"):
        return Forbidden(r.reason, code=r.code)
    if r.code in ("already_decided", "not_waiting"):
        return Conflict(r.reason, code=r.code)
    if r.code == "expired":
        return Gone(r.reason, code="expired")
    return InvalidInput(r.reason, code=r.code)
