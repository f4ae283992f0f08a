"""ApprovalsTx in SQL: approval requests (for inboxes), decisions, single-use links (stored as a hash of
the token only), and the approval rows an append's effects write."""

from __future__ import annotations

import json
from typing import Any

from ...core.effects import (
    CloseApprovalRequest,
    Effect,
    OpenApprovalRequest,
    RecordApprovalDecision,
    RevokeLinks,
    UpdateApprovers,
)
from ...core.state import RunState
from ..port import ApprovalRequestRow, ConcurrencyError, DecisionRow, LinkRow, NewLink
from .base import SqlBase, ms_of

__all__ = ["SqlApprovalsTx"]


class SqlApprovalsTx(SqlBase):
    def _request(self, r: Any) -> ApprovalRequestRow:
        return {
            "request_id": r[0],
            "tenant": r[1],
            "run_id": r[2],
            "step": r[3],
            "users": json.loads(r[4]),
            "groups": json.loads(r[5]),
            "initiator": r[6],
            "allow_initiator": bool(r[7]),
            "status": r[8],
            "expires_at": r[9],
            "created_at": r[10],
        }

    def approval_request(self, request_id: str) -> ApprovalRequestRow | None:
        r = self._one("approval_request_get", request_id=request_id)
        return self._request(r) if r else None

    def pending_approval_requests(self, tenant: str) -> list[ApprovalRequestRow]:
        return [
            self._request(r) for r in self.c.execute(self.q["approval_requests_pending"], {"tenant": tenant})
        ]

    def approval_decision(self, request_id: str, approver: str) -> DecisionRow | None:
        r = self._one("approval_decision_get", request_id=request_id, approver=approver)
        return {"decision": r[0], "link_id": r[1], "at": r[2]} if r else None

    # --- links ---------------------------------------------------------------------------------
    def _link(self, r: Any) -> LinkRow:
        return {
            "link_id": r[0],
            "tenant": r[1],
            "run_id": r[2],
            "step": r[3],
            "request_id": r[4],
            "approver": r[5],
            "status": r[6],
            "expires_at": r[7],
            "created_at": r[8],
            "used_at": r[9],
            "decision": r[10],
        }

    def insert_link(self, link: NewLink, token_hash: str) -> None:
        # The columns its creator gives (NewLink); status, use and decision are the store's.
        self.c.execute(self.q["link_insert"], {**link, "token_hash": token_hash})

    def link_by_hash(self, token_hash: str) -> LinkRow | None:
        r = self._one("link_by_hash", token_hash=token_hash)
        return self._link(r) if r else None

    def link_by_id(self, link_id: str) -> LinkRow | None:
        r = self._one("link_by_id", link_id=link_id)
        return self._link(r) if r else None

    def links_of_request(self, request_id: str) -> list[LinkRow]:
        return [self._link(r) for r in self.c.execute(self.q["links_of_request"], {"request_id": request_id})]

    def consume_link(self, token_hash: str, decision: str, used_at: str) -> bool:
        cur = self.c.execute(
            self.q["link_consume"], {"token_hash": token_hash, "decision": decision, "used_at": used_at}
        )
        return bool(cur.rowcount == 1)

    def revoke_links(self, request_id: str, approver: str | None, link_id: str | None) -> int:
        cur = self.c.execute(
            self.q["links_revoke"], {"request_id": request_id, "approver": approver, "link_id": link_id}
        )
        return int(cur.rowcount)

    # --- the approval rows of an append --------------------------------------------------------
    def _write_approval_effect(self, run: RunState, fx: Effect) -> None:
        """An approval effect of an append (any other effect is not this module's: nothing happens)."""
        if isinstance(fx, OpenApprovalRequest):
            self.c.execute(
                self.q["approval_request_insert"],
                {
                    "request_id": fx.request_id,
                    "tenant": run.tenant,
                    "run_id": run.run_id,
                    "step": fx.step,
                    "users": json.dumps(list(fx.users)),
                    "groups": json.dumps(list(fx.groups)),
                    "initiator": fx.initiator,
                    "allow_initiator": int(fx.allow_initiator),
                    "expires_at": ms_of(fx.expires_at),
                    "created_at": run.updated_at,
                },
            )
        elif isinstance(fx, UpdateApprovers):
            row = self.approval_request(fx.request_id)
            if row is not None:
                users = [fx.new if u == fx.old else u for u in row["users"]]
                users = list(dict.fromkeys([*users, fx.new]))
                self.c.execute(
                    self.q["approval_request_users"],
                    {"request_id": fx.request_id, "users": json.dumps(users)},
                )
        elif isinstance(fx, RecordApprovalDecision):
            try:
                self.c.execute(
                    self.q["approval_decision_insert"],
                    {
                        "request_id": fx.request_id,
                        "approver": fx.approver,
                        "decision": fx.decision,
                        "link_id": fx.link_id,
                        "at": fx.at,
                    },
                )
            except self.integrity_error:
                raise ConcurrencyError(f"{fx.approver} already decided on {fx.request_id}") from None
        elif isinstance(fx, CloseApprovalRequest):
            self.c.execute(
                self.q["approval_request_close"], {"request_id": fx.request_id, "status": fx.status}
            )
            self.revoke_links(fx.request_id, None, None)
        elif isinstance(fx, RevokeLinks):
            self.revoke_links(fx.request_id, fx.approver, fx.link_id)
