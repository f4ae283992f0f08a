"""The approvals aggregate: approval requests (for inboxes), single-use links (the store keeps only a
token's hash) and decisions (implemented by sqltx/approvals.py)."""

from __future__ import annotations

from typing import Literal, Protocol, TypedDict

__all__ = ["ApprovalRequestRow", "ApprovalsTx", "DecisionRow", "LinkRow", "NewLink"]


class ApprovalRequestRow(TypedDict):
    """An approval request as the inboxes and the notifier read it (the run's snapshot holds the rest)."""

    request_id: str
    tenant: str
    run_id: str
    step: str
    users: list[str]
    groups: list[str]
    initiator: str | None
    allow_initiator: bool
    status: str
    expires_at: int  # epoch ms
    created_at: str


class DecisionRow(TypedDict):
    decision: str
    link_id: str | None
    at: str


class NewLink(TypedDict):
    """What a link's creator gives; status, use and decision are the store's."""

    link_id: str
    tenant: str
    run_id: str
    step: str
    request_id: str
    approver: str
    expires_at: int  # epoch ms
    created_at: str


class LinkRow(NewLink):
    status: Literal["pending", "used", "revoked"]
    used_at: str | None
    decision: str | None


class ApprovalsTx(Protocol):
    def approval_request(self, request_id: str) -> ApprovalRequestRow | None: ...
    def pending_approval_requests(self, tenant: str) -> list[ApprovalRequestRow]: ...
    def approval_decision(self, request_id: str, approver: str) -> DecisionRow | None: ...
    def insert_link(self, link: NewLink, token_hash: str) -> None: ...
    def link_by_hash(self, token_hash: str) -> LinkRow | None: ...
    def link_by_id(self, link_id: str) -> LinkRow | None: ...
    def links_of_request(self, request_id: str) -> list[LinkRow]: ...
    def consume_link(self, token_hash: str, decision: str, used_at: str) -> bool: ...
    def revoke_links(self, request_id: str, approver: str | None, link_id: str | None) -> int: ...
