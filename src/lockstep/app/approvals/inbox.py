"""The approver's inbox: the pending requests a person may decide, and the Review page of one of them
(opened from the inbox with the session as the identity, so no link is minted)."""

from __future__ import annotations

from ...core.approval import eligible
from ...core.lanes import approval_at, approval_by_request
from ...core.shape import for_view
from ...errors import Conflict, Gone, NotFound
from ...store import ApprovalsTx
from ..port import KernelPort
from ..principals import Principal
from ..runs import Runs
from ..views import ApprovalPage, DefinitionRef, InboxItem, LinkRef
from .decisions import approval_page, check_seat

__all__ = ["Inbox"]


class Inbox:
    def __init__(self, kernel: KernelPort[ApprovalsTx], runs: Runs) -> None:
        self.kernel = kernel
        self.runs = runs

    def inbox(self, principal: Principal) -> list[InboxItem]:
        """Pending requests this person may decide and has not decided yet."""
        with self.kernel.read() as tx:
            pending = tx.pending_approval_requests(principal.tenant)
            decided = {
                r["request_id"] for r in pending if tx.approval_decision(r["request_id"], principal.name)
            }
        out = []
        for r in pending:
            if r["request_id"] in decided:
                continue
            if principal.name not in r["users"] and not set(principal.groups) & set(r["groups"]):
                continue
            if not r["allow_initiator"] and r["initiator"] == principal.name:
                continue
            try:
                state = self.runs.redacted(self.kernel.state(principal.tenant, r["run_id"]))
            except (NotFound, Gone):  # pragma: no cover - finished (and purged) since the list was read
                continue
            a = approval_by_request(state, r["request_id"])  # a run may wait for several, one per branch
            if a is None:
                continue
            out.append(
                InboxItem(
                    request_id=r["request_id"],
                    run_id=r["run_id"],
                    step=r["step"],
                    definition=DefinitionRef.model_validate(state.definition),
                    details=for_view(a["details"]),
                    quorum=a["policy"]["quorum"],
                    decisions=a["decisions"],
                    requested_at=a["requested_at"],
                    expires_at=a["expires_at"],
                    form=a["policy"].get("form"),
                )
            )
        return out

    def request_view(self, principal: Principal, run_id: str, step: str) -> ApprovalPage:
        """What the inbox's Review page shows: the pending request at `step`, for a logged-in approver.
        No link is minted (the session is the identity; a link authorizes nothing), so opening it any
        number of times appends nothing to the run's history."""
        state = self.runs.redacted(self.kernel.state(principal.tenant, run_id))
        a = approval_at(state, step)
        if a is None:
            raise Conflict(f"run {run_id} is not waiting for an approval at step {step}", code="not_waiting")
        check_seat(principal, a)
        policy = a["policy"]
        if not eligible(policy, principal.name, principal.groups) or (
            not policy["allow_initiator"] and a.get("initiator") == principal.name
        ):
            # The same answer as for a request that is not there: no details for people outside the policy.
            why = f"run {run_id} is not waiting for your approval at step {step}"
            raise Conflict(why, code="not_waiting")
        link = LinkRef(request_id=a["request_id"], step=step, approver=principal.name, run_id=run_id)
        return approval_page(self.runs, state, link, a)
