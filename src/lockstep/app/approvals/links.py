"""Approval links and approvers, the operators' side: links are minted at delivery (or by an operator)
and stored as hashes, listed and revoked; a request's named approver can be replaced.

A link is not authorization: deciding needs the approver's own identity (API key or UI session), see
decisions.py. The link only says which request and which approver.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import timedelta

from ...core.commands import IssueApprovalLink, Rejected, ReplaceApprover, RevokeApprovalLink
from ...core.lanes import approval_at, approvals
from ...core.timeutil import iso, parse_iso
from ...errors import Conflict, Forbidden, InvalidInput, NotFound, Refused
from ...store import ApproveTx
from ..audit import Audit
from ..port import KernelPort
from ..views import LinkView, MintedLink, Reassigned, RevokedLink

__all__ = ["TOKEN_RE", "ApprovalLinks", "token_hash"]

# 256 bits from secrets.token_urlsafe(32): 43 URL-safe characters.
TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{43}$")


def token_hash(token: str) -> str:
    """What is stored of a link's token (and looked up by): its sha256."""
    return hashlib.sha256(token.encode()).hexdigest()


class ApprovalLinks:
    def __init__(self, kernel: KernelPort[ApproveTx], base_url: str) -> None:
        self.kernel = kernel
        self.base_url = base_url
        self.audit = Audit(kernel)  # links minted and revoked, approvers replaced

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
                raise self.kernel.missing(tx, run_id, tenant)  # Gone if purged: its tombstone says why
            s = loaded.state
            a = approval_at(s, step)
            if a is None:
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
                token_hash(token),
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
            if loaded is None:  # pragma: no cover - a purge revoked its links when the run finished
                raise self.kernel.missing(tx, link["run_id"], tenant)
            s = loaded.state
            d = self.kernel.definition_of(tx, s)
            cmd = RevokeApprovalLink(link["request_id"], link["approver"], link_id, reason, actor)
            try:
                self.kernel.apply(tx, loaded, cmd, self.kernel.clock(), d)
            except Rejected:
                tx.revoke_links(link["request_id"], None, link_id)  # request already closed: just revoke
            self.audit.record(tenant, actor, "approval.link_revoke", link_id, "ok", tx=tx, reason=reason)
        return RevokedLink(link_id=link_id, status="revoked")

    def links(self, tenant: str, run_id: str) -> list[LinkView]:
        state = self.kernel.state(tenant, run_id)
        requests = [a["request_id"] for a in approvals(state)]  # one per branch waiting for people
        if not requests:
            return []
        with self.kernel.read() as tx:
            rows = [row for request in requests for row in tx.links_of_request(request)]
        return [LinkView(**row) for row in rows]

    def reassign(
        self, tenant: str, run_id: str, step: str, old: str, new: str, reason: str, actor: str | None = None
    ) -> Reassigned:
        """Replace a named approver. The core decides who may take the seat (see replace_approver); here
        we read the new approver's account as it is now and hand the core their roles and groups."""
        if not reason.strip():
            raise InvalidInput("a reason is required (--reason TEXT)")
        state = self.kernel.state(tenant, run_id)
        a = approval_at(state, step)
        if a is None:
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
