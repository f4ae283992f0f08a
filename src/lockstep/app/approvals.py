"""Human approval, the service side: links (minted at delivery, stored as hashes), decisions with the
approver's identity re-checked at submit time, inboxes, reassignment and revocation.

A link is not authorization: deciding needs the approver's own identity (API key or UI session). The
link only says which request and which approver; the token is consumed by a conditional update in the
same transaction as the decision event, so a double click or a replay can never decide twice.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import datetime, timedelta
from typing import Any, Literal, cast

from ..core.approval import eligible
from ..core.commands import DecideApproval, IssueApprovalLink, Rejected, ReplaceApprover, RevokeApprovalLink
from ..core.definition import Definition
from ..core.shape import for_view
from ..core.state import RunState
from ..core.timeutil import iso, parse_iso
from ..errors import Conflict, Forbidden, Gone, InvalidInput, LockstepError, NotFound, Refused
from ..store import LoadedRun, Tx
from .audit import Audit
from .kernel import Kernel
from .principals import Principal, Principals
from .runs import Runs
from .views import (
    ApprovalPage,
    DecisionResult,
    DefinitionRef,
    InboxItem,
    LinkRef,
    LinkView,
    MintedLink,
    Reassigned,
    RevokedLink,
    RunStatus,
)
from .views.recorded import ApprovalRequest, Decision

__all__ = ["TOKEN_RE", "Approvals"]

# 256 bits from secrets.token_urlsafe(32): 43 URL-safe characters.
TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{43}$")
UNKNOWN = "unknown approval link (it does not exist, or it was mistyped)"


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Approvals:
    def __init__(
        self, kernel: Kernel, runs: Runs, principals: Principals, base_url: str = "http://127.0.0.1:8080"
    ) -> None:
        self.kernel = kernel
        self.runs = runs
        self.principals = principals
        self.base_url = base_url.rstrip("/")
        self.audit = Audit(kernel)  # links minted and revoked, approvers replaced

    def linking_to(self, base_url: str) -> Approvals:
        """The same approvals, minting links under `base_url` (the server's public address)."""
        return Approvals(self.kernel, self.runs, self.principals, base_url)

    def _now_ms(self) -> int:
        return int(self.kernel.clock().timestamp() * 1000)

    # --- links ---------------------------------------------------------------------------------
    def mint(
        self,
        tenant: str,
        run_id: str,
        step: str,
        approver: str,
        *,
        expires_in: timedelta | None = None,
        by: str | None = None,
    ) -> MintedLink:
        """Mint a fresh single-use link for one approver; returns the raw token (never stored) once."""
        token = secrets.token_urlsafe(32)
        link_id = "lnk_" + secrets.token_hex(8)
        now = self.kernel.clock()
        with self.kernel.write() as tx:
            loaded = tx.load_run(run_id)
            if loaded is None or loaded.state.tenant != tenant:
                raise NotFound(f"run {run_id} not found in tenant {tenant}")
            s = loaded.state
            a = s.approval
            if a is None or a["step"] != step:
                raise Refused(
                    f"run {run_id} is not waiting for an approval at step {step}"
                    + (f" (it waits at {s.current_step})" if s.current_step else ""),
                    code="not_waiting",
                )
            user = tx.user(tenant, approver)
            if user is None or user.disabled:
                raise InvalidInput(f"{approver} is not an enabled user of tenant {tenant}")
            expires = parse_iso(a["expires_at"])
            if expires_in is not None:
                expires = min(expires, now + expires_in)
            cmd = IssueApprovalLink(
                a["request_id"], approver, link_id, iso(expires), user.roles, user.groups, by
            )
            d = self.kernel.definition_of(tx, s)
            try:
                self.kernel.apply(tx, loaded, cmd, now, d)
            except Rejected as r:
                raise Refused(r.reason, code=r.code) from None
            tx.insert_link(
                {
                    "link_id": link_id,
                    "tenant": tenant,
                    "run_id": run_id,
                    "step": step,
                    "request_id": a["request_id"],
                    "approver": approver,
                    "expires_at": int(expires.timestamp() * 1000),
                    "created_at": iso(now),
                },
                _sha(token),
            )
            detail = {"run_id": run_id, "step": step, "approver": approver, "expires_at": iso(expires)}
            self.audit.record(tenant, by, "approval.link_mint", link_id, "ok", tx=tx, **detail)
        return MintedLink(
            url=f"{self.base_url}/approve/{token}",
            token=token,
            link_id=link_id,
            expires_at=iso(expires),
            approver=approver,
            request_id=a["request_id"],
        )

    def revoke(self, tenant: str, link_id: str, reason: str, actor: str | None = None) -> RevokedLink:
        if not reason.strip():
            raise InvalidInput("a reason is required (--reason TEXT)")
        self.kernel.check_value(tenant, reason, "max_payload_bytes", "the reason")
        with self.kernel.write() as tx:
            link = tx.link_by_id(link_id)
            if link is None or link["tenant"] != tenant:
                raise NotFound(f"no approval link {link_id} in tenant {tenant}")
            if link["status"] != "pending":
                raise Refused(f"link {link_id} is already {link['status']}", code="not_pending")
            loaded = tx.load_run(link["run_id"])
            if loaded is None:  # pragma: no cover - links belong to runs
                raise NotFound(f"run {link['run_id']} not found")
            s = loaded.state
            d = self.kernel.definition_of(tx, s)
            cmd = RevokeApprovalLink(link["request_id"], link["approver"], link_id, reason, actor)
            try:
                self.kernel.apply(tx, loaded, cmd, self.kernel.clock(), d)
            except Rejected:
                tx.revoke_links(link["request_id"], None, link_id)  # request already closed: just revoke
            self.audit.record(tenant, actor, "approval.link_revoke", link_id, "ok", tx=tx, reason=reason)
        return RevokedLink(link_id=link_id, status="revoked")

    # --- deciding ------------------------------------------------------------------------------
    def inspect(self, principal: Principal, token: str) -> ApprovalPage:
        """What the approval page shows for a token; never changes anything."""
        link = self._link_for(principal, token, consuming=False)
        state = self.kernel.state(principal.tenant, link["run_id"])
        a = state.approval if state.approval and state.approval["request_id"] == link["request_id"] else None
        ref = LinkRef(
            request_id=link["request_id"], step=link["step"], approver=link["approver"], run_id=link["run_id"]
        )
        return ApprovalPage(link=ref, run=self.runs.describe(state), approval=for_view(a))

    def _link_for(self, principal: Principal, token: str, *, consuming: bool) -> dict[str, Any]:
        well_formed = TOKEN_RE.match(token) is not None
        with self.kernel.read() as tx:
            # Malformed tokens take the same path as unknown ones: no timing hint about the format.
            link = tx.link_by_hash(_sha(token[:200]))
            prior = tx.approval_decision(link["request_id"], link["approver"]) if link else None
        return self._check_link(principal, link if well_formed else None, prior)

    def _check_link(
        self, principal: Principal, link: dict[str, Any] | None, prior: dict[str, Any] | None
    ) -> dict[str, Any]:
        if link is None or link["tenant"] != principal.tenant:
            raise NotFound(UNKNOWN, code="unknown_link")
        # Identity first: someone else's link, spent or not, tells them nothing about its decision.
        if link["approver"] != principal.name:
            raise Forbidden(
                f"this link was issued to {link['approver']}, not to {principal.name}", code="not_bound"
            )
        if link["status"] == "used":
            raise Conflict(
                f"this link was already used: {link['approver']} decided {link['decision']} at "
                f"{link['used_at']}",
                code="already_decided",
                extra={
                    "decision": {
                        "approver": link["approver"],
                        "decision": link["decision"],
                        "at": link["used_at"],
                    }
                },
            )
        if link["status"] == "revoked":
            raise Gone("this approval link was revoked (a newer link may have been sent)", code="revoked")
        if link["expires_at"] <= self._now_ms():
            raise Gone("this approval link has expired", code="expired")
        if not principal.can("approve"):
            raise Forbidden(f"{principal.name} does not have the approver role", code="not_an_approver")
        if prior is not None:
            raise Conflict(
                f"{link['approver']} already decided {prior['decision']} at {prior['at']}",
                code="already_decided",
                extra={"decision": {"approver": link["approver"], **prior}},
            )
        return link

    def decide(
        self,
        principal: Principal,
        token: str,
        decision: str,
        comment: str | None = None,
        *,
        channel: str = "api",
    ) -> DecisionResult:
        """Record one decision; every attempt, refused or not, is written to the audit log."""
        link_id = None
        try:
            if decision not in ("approve", "reject"):
                raise InvalidInput(f"decision must be approve or reject, not {decision!r}")
            result = self._decide(principal, token, decision, comment)
            link_id = result.link_id
        except LockstepError as exc:
            self.principals.audit(
                principal.tenant,
                principal.name,
                "approval.decide",
                link_id,
                "refused",
                code=exc.code,
                channel=channel,
                decision=decision,
                token_sha256_prefix=_sha(token[:200])[:12],
            )
            raise
        self.principals.audit(
            principal.tenant,
            principal.name,
            "approval.decide",
            link_id,
            "ok",
            channel=channel,
            decision=decision,
            request_id=result.request_id,
        )
        return result

    def _decide(self, principal: Principal, token: str, decision: str, comment: str | None) -> DecisionResult:
        self.kernel.check_value(principal.tenant, comment, "max_payload_bytes", "the comment")
        well_formed = TOKEN_RE.match(token) is not None
        h = _sha(token[:200])
        now = self.kernel.clock()
        with self.kernel.write() as tx:
            found = tx.link_by_hash(h)
            prior = tx.approval_decision(found["request_id"], found["approver"]) if found else None
            link = self._check_link(principal, found if well_formed else None, prior)
            # Re-read the approver now: membership and roles at submit time are what count.
            user = tx.user(principal.tenant, principal.name)
            if user is None or user.disabled:
                raise Forbidden(f"{principal.name} is disabled", code="disabled")
            loaded = tx.load_run(link["run_id"])
            if loaded is None:  # pragma: no cover
                raise NotFound(UNKNOWN, code="unknown_link")
            s = loaded.state
            d = self.kernel.definition_of(tx, s)
            cmd = DecideApproval(
                link["request_id"],
                user.name,
                decision,
                (comment or "")[:2000] or None,
                user.roles,
                user.groups,
                link["link_id"],
            )
            # Consume first: settling the request revokes its other pending links in the same transaction.
            # If the decision is refused below, the whole transaction (and this update) rolls back.
            if not tx.consume_link(h, decision, iso(now)):
                raise Conflict("this link was used concurrently", code="already_decided")
            after = self._record(tx, loaded, cmd, now, d)
        return _decided(after, link["request_id"], link["step"], link["link_id"], decision)

    def _record(
        self, tx: Tx, loaded: LoadedRun, cmd: DecideApproval, now: datetime, d: Definition
    ) -> RunState:
        """Decide `cmd` in the caller's transaction; the core's refusal becomes the API's error."""
        try:
            after, _events = self.kernel.apply(tx, loaded, cmd, now, d)
        except Rejected as r:
            raise _refusal(r) from None
        if after is None:  # pragma: no cover - a recorded decision always leaves a state
            raise Conflict("the decision was not recorded", code="not_waiting")
        return after

    # --- operators and inboxes -----------------------------------------------------------------
    def reassign(
        self, tenant: str, run_id: str, step: str, old: str, new: str, reason: str, actor: str | None = None
    ) -> Reassigned:
        """Replace a named approver. The core decides who may take the seat (see replace_approver); here
        we read the new approver's account as it is now and hand the core their roles and groups."""
        if not reason.strip():
            raise InvalidInput("a reason is required (--reason TEXT)")
        state = self.kernel.state(tenant, run_id)
        a = state.approval
        if a is None or a["step"] != step:
            raise Refused(f"run {run_id} is not waiting for an approval at step {step}", code="not_waiting")
        with self.kernel.read() as tx:
            user = tx.user(tenant, new)
        if user is None or user.disabled:
            raise InvalidInput(f"{new} is not an enabled user of tenant {tenant}")
        cmd = ReplaceApprover(a["request_id"], old, new, reason, actor, user.roles, user.groups)
        try:
            self.audit.command(tenant, actor, "approval.reassign", run_id, cmd, step=step, old=old, new=new)
        except Refused as exc:
            if exc.code in ("not_an_approver", "initiator", "outside_policy") and old in a["policy"]["users"]:
                raise InvalidInput(str(exc), code="invalid_input") from None
            if exc.code == "self_assignment":
                raise Forbidden(str(exc), code="self_assignment") from None
            if exc.code in ("already_decided", "not_waiting"):
                raise Conflict(str(exc), code=exc.code) from None
            raise
        return Reassigned(run_id=run_id, step=step, request_id=a["request_id"], old=old, new=new)

    def request_view(self, principal: Principal, run_id: str, step: str) -> ApprovalPage:
        """What the inbox's Review page shows: the pending request at `step`, for a logged-in approver.
        No link is minted (the session is the identity; a link authorizes nothing), so opening it any
        number of times appends nothing to the run's history."""
        state = self.kernel.state(principal.tenant, run_id)
        a = state.approval
        if a is None or a["step"] != step:
            raise Conflict(f"run {run_id} is not waiting for an approval at step {step}", code="not_waiting")
        self._check_seat(principal, a)
        policy = a["policy"]
        if not eligible(policy, principal.name, principal.groups) or (
            not policy["allow_initiator"] and a.get("initiator") == principal.name
        ):
            # The same answer as for a request that is not there: no details for people outside the policy.
            why = f"run {run_id} is not waiting for your approval at step {step}"
            raise Conflict(why, code="not_waiting")
        link = LinkRef(request_id=a["request_id"], step=step, approver=principal.name, run_id=run_id)
        return ApprovalPage(link=link, run=self.runs.describe(state), approval=cast(ApprovalRequest, a))

    def _check_seat(self, principal: Principal, a: dict[str, Any]) -> None:
        if not principal.can("approve"):
            raise Forbidden(f"{principal.name} does not have the approver role", code="not_an_approver")
        prior = next((d for d in a["decisions"] if d["approver"] == principal.name), None)
        if prior is not None:
            raise Conflict(
                f"{principal.name} already decided {prior['decision']} at {prior['at']}",
                code="already_decided",
                extra={"decision": {"approver": principal.name, **prior}},
            )

    def decide_in_session(
        self, principal: Principal, run_id: str, step: str, decision: str, comment: str | None = None
    ) -> DecisionResult:
        """Decide from the inbox, as the logged-in approver, without a link (audited like decide)."""
        try:
            if decision not in ("approve", "reject"):
                raise InvalidInput(f"decision must be approve or reject, not {decision!r}")
            result = self._decide_in_session(principal, run_id, step, decision, comment)
        except LockstepError as exc:
            self.principals.audit(
                principal.tenant,
                principal.name,
                "approval.decide",
                None,
                "refused",
                code=exc.code,
                channel="inbox",
                decision=decision,
                run_id=run_id,
                step=step,
            )
            raise
        self.principals.audit(
            principal.tenant,
            principal.name,
            "approval.decide",
            None,
            "ok",
            channel="inbox",
            decision=decision,
            request_id=result.request_id,
        )
        return result

    def _decide_in_session(
        self, principal: Principal, run_id: str, step: str, decision: str, comment: str | None
    ) -> DecisionResult:
        now = self.kernel.clock()
        with self.kernel.write() as tx:
            loaded = tx.load_run(run_id)
            if loaded is None or loaded.state.tenant != principal.tenant:
                raise NotFound(f"run {run_id} not found in tenant {principal.tenant}")
            s = loaded.state
            a = s.approval
            if a is None or a["step"] != step:
                raise Conflict(
                    f"run {run_id} is not waiting for an approval at step {step}", code="not_waiting"
                )
            self._check_seat(principal, a)
            user = tx.user(principal.tenant, principal.name)
            if user is None or user.disabled:
                raise Forbidden(f"{principal.name} is disabled", code="disabled")
            d = self.kernel.definition_of(tx, s)
            cmd = DecideApproval(
                a["request_id"], user.name, decision, (comment or "")[:2000] or None, user.roles, user.groups
            )
            after = self._record(tx, loaded, cmd, now, d)
        return _decided(after, a["request_id"], step, None, decision)

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
                state = self.kernel.state(principal.tenant, r["run_id"])
            except NotFound:  # pragma: no cover
                continue
            if state.approval is None or state.approval["request_id"] != r["request_id"]:
                continue
            out.append(
                InboxItem(
                    request_id=r["request_id"],
                    run_id=r["run_id"],
                    step=r["step"],
                    definition=DefinitionRef.model_validate(state.definition),
                    details=for_view(state.approval["details"]),
                    quorum=state.approval["policy"]["quorum"],
                    decisions=state.approval["decisions"],
                    requested_at=state.approval["requested_at"],
                    expires_at=state.approval["expires_at"],
                )
            )
        return out

    def links(self, tenant: str, run_id: str) -> list[LinkView]:
        state = self.kernel.state(tenant, run_id)
        request = state.approval["request_id"] if state.approval else None
        if request is None:
            return []
        with self.kernel.read() as tx:
            rows = tx.links_of_request(request)
        return [LinkView(**row) for row in rows]


def _decided(
    after: RunState, request_id: str, step: str, link_id: str | None, decision: str
) -> DecisionResult:
    """What a recorded decision answers: the request's state after it and the run's status."""
    pending = after.approval
    done = after.steps[step].output or {}
    decisions: list[Decision] = (pending or done).get("decisions", [])
    return DecisionResult(
        request_id=request_id,
        run_id=after.run_id,
        step=step,
        link_id=link_id,
        decision=cast(Literal["approve", "reject"], decision),
        request_status="pending" if pending is not None else done.get("outcome"),
        decisions=decisions,
        run_status=cast(RunStatus, after.status),
    )


def _refusal(r: Rejected) -> LockstepError:
    if r.code == "already_decided":
        return Conflict(r.reason, code="already_decided")
    if r.code in ("not_an_approver", "initiator"):
        return Forbidden(r.reason, code=r.code)
    if r.code == "not_waiting":
        return Conflict(r.reason, code="not_waiting")
    return Refused(r.reason, code=r.code)
