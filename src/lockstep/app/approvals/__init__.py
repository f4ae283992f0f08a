"""Human approval, the service side (part of the application service layer).

    links.py      links (minted at delivery, stored as hashes), listing, revocation, reassignment
    decisions.py  decisions by link or from the inbox, the approver's identity re-checked at submit time
    inbox.py      the pending requests a person may decide, and the Review page of one

`Approvals` is the one object the entry points use: each call is its part's own bound method.
"""

from __future__ import annotations

from ...core.canonical import JSONObject
from ...errors import InvalidInput
from ...store import ApproveTx
from ..migrations import Migrations, is_migration_request
from ..port import KernelPort
from ..principals import Principal, Principals
from ..runs import Runs
from ..views import DecisionResult, InboxItem, MigrationRequestView
from .decisions import ApprovalDecisions
from .inbox import Inbox
from .links import TOKEN_RE, ApprovalLinks

__all__ = ["TOKEN_RE", "Approvals"]


class Approvals:
    def __init__(
        self,
        kernel: KernelPort[ApproveTx],
        runs: Runs,
        principals: Principals,
        base_url: str = "http://127.0.0.1:8080",
        *,
        migrations: Migrations | None = None,
    ) -> None:
        self.kernel = kernel
        self.migrations = migrations
        self.runs = runs
        self.principals = principals
        self.base_url = base_url.rstrip("/")
        links = ApprovalLinks(kernel, self.base_url)
        decisions = ApprovalDecisions(kernel, runs, principals)
        inbox = Inbox(kernel, runs)

        # Links and approvers (operators).
        self.mint = links.mint
        self.revoke = links.revoke
        self.links = links.links
        self.reassign = links.reassign

        # Decisions (approvers).
        self.inspect = decisions.inspect
        self.decide = decisions.decide
        self.decide_in_session = decisions.decide_in_session
        self._decide_by_request = decisions.decide_by_request

        # The inbox.
        self._inbox = inbox.inbox
        self.request_view = inbox.request_view

    def inbox(self, principal: Principal) -> list[InboxItem]:
        """Pending requests this person may decide and has not decided yet: approval steps' requests,
        then migrations that need approval (kind `migration`)."""
        items = self._inbox(principal)
        return items if self.migrations is None else [*items, *self.migrations.inbox(principal)]

    def decide_by_request(
        self,
        principal: Principal,
        request_id: str,
        decision: str,
        comment: str | None = None,
        *,
        values: JSONObject | None = None,
    ) -> DecisionResult | MigrationRequestView:
        """Decide an approval step's request, or a migration request (`mig_...`), by its id."""
        if self.migrations is not None and is_migration_request(request_id):
            if values:
                raise InvalidInput("a migration request has no form: decide without values", code="no_form")
            return self.migrations.decide(principal, request_id, decision, comment)
        return self._decide_by_request(principal, request_id, decision, comment, values=values)

    def linking_to(self, base_url: str) -> Approvals:
        """The same approvals, minting links under `base_url` (the server's public address)."""
        return Approvals(self.kernel, self.runs, self.principals, base_url, migrations=self.migrations)
