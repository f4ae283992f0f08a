"""Approval decisions: by link (the token names the request and the approver) or from the inbox (the
session is the identity), with the approver's identity and roles re-checked at submit time, each attempt
audited.

The token is consumed by a conditional update in the same transaction as the decision event, so a
double click or a replay can never decide twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, cast

from ...core.canonical import JSONObject
from ...core.commands import DecideApproval, Rejected
from ...core.definition import Definition
from ...core.form import check_values
from ...core.lanes import approval_at, approval_by_request
from ...core.outcomes import approval_outcomes
from ...core.shape import for_view
from ...core.state import RunState, StepState
from ...core.timeutil import iso
from ...errors import Conflict, Forbidden, Gone, InvalidInput, LockstepError, NotFound, Refused
from ...store import ApplyTx, ApproveTx, DecisionRow, LinkRow, LoadedRun
from ..audit import Audit
from ..port import KernelPort
from ..principals import Principal, Principals
from ..runs import Runs
from ..views import ApprovalOutcomes, ApprovalPage, DecisionResult, LinkRef, RunStatus
from ..views.recorded import Decision
from .links import TOKEN_RE, token_hash

__all__ = ["UNKNOWN", "ApprovalDecisions", "approval_page", "check_form", "check_seat", "settled"]

UNKNOWN = "unknown approval link (it does not exist, or it was mistyped)"


def approval_page(runs: Runs, state: RunState, ref: LinkRef, a: JSONObject | None) -> ApprovalPage:
    """The approval page of request `a` (None: no longer pending) of the redacted `state`: the run as
    its view shows it (sensitive input redacted) and what each decision leads to."""
    outcomes = None
    if a is not None:
        d = runs.kernel.definition(state.tenant, state.definition["name"], state.definition["version"])
        outcomes = ApprovalOutcomes(**approval_outcomes(d, state, str(a["step"]), a["policy"]))
    return ApprovalPage(link=ref, run=runs.describe(state), approval=for_view(a), outcomes=outcomes)


class ApprovalDecisions:
    def __init__(self, kernel: KernelPort[ApproveTx], runs: Runs, principals: Principals) -> None:
        self.kernel = kernel
        self.runs = runs
        self.principals = principals
        self.audit = Audit(kernel)  # a decision's row, in its transaction

    def _now_ms(self) -> int:
        return int(self.kernel.clock().timestamp() * 1000)

    def inspect(self, principal: Principal, token: str) -> ApprovalPage:
        """What the approval page shows for a token; never changes anything."""
        link = self._link_for(principal, token, consuming=False)
        state = self.runs.redacted(self.kernel.state(principal.tenant, link["run_id"]))
        a = approval_by_request(state, link["request_id"])
        ref = LinkRef(
            request_id=link["request_id"], step=link["step"], approver=link["approver"], run_id=link["run_id"]
        )
        return approval_page(self.runs, state, ref, a)

    def _link_for(self, principal: Principal, token: str, *, consuming: bool) -> LinkRow:
        well_formed = TOKEN_RE.match(token) is not None
        with self.kernel.read() as tx:
            # Malformed tokens take the same path as unknown ones: no timing hint about the format.
            link = tx.link_by_hash(token_hash(token[:200]))
            prior = tx.approval_decision(link["request_id"], link["approver"]) if link else None
        return self._check_link(principal, link if well_formed else None, prior)

    def _check_link(self, principal: Principal, link: LinkRow | None, prior: DecisionRow | None) -> LinkRow:
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
        values: JSONObject | None = None,
    ) -> DecisionResult:
        """Record one decision; every attempt, refused or not, is written to the audit log."""
        try:
            if decision not in ("approve", "reject"):
                raise InvalidInput(f"decision must be approve or reject, not {decision!r}")
            return self._decide(principal, token, decision, comment, values, channel)
        except LockstepError as exc:
            self.principals.audit(
                principal.tenant,
                principal.name,
                "approval.decide",
                None,  # a refused token names no link: the token's hash prefix below identifies it
                "refused",
                code=exc.code,
                channel=channel,
                decision=decision,
                token_sha256_prefix=token_hash(token[:200])[:12],
            )
            raise

    def _decide(
        self,
        principal: Principal,
        token: str,
        decision: str,
        comment: str | None,
        values: JSONObject | None,
        channel: str,
    ) -> DecisionResult:
        self.kernel.check_value(principal.tenant, comment, "max_payload_bytes", "the comment")
        self.kernel.check_value(principal.tenant, values, "max_payload_bytes", "the form's values")
        well_formed = TOKEN_RE.match(token) is not None
        h = token_hash(token[:200])
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
            if loaded is None:  # pragma: no cover - a purge revoked its links when the run finished
                raise self.kernel.missing(tx, link["run_id"], principal.tenant)
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
                values,
            )
            check_form(approval_by_request(s, link["request_id"]), values, decision)
            # Consume first: settling the request revokes its other pending links in the same transaction.
            # If the decision is refused below, the whole transaction (and this update) rolls back.
            if not tx.consume_link(h, decision, iso(now)):
                raise Conflict("this link was used concurrently", code="already_decided")
            after = self._record(tx, loaded, cmd, now, d)
            self._audit_ok(tx, principal, link["link_id"], channel, decision, link["request_id"])
        return _decided(after, link["request_id"], link["step"], link["link_id"], decision)

    def _audit_ok(
        self,
        tx: ApproveTx,
        principal: Principal,
        link_id: str | None,
        channel: str,
        decision: str,
        request_id: str,
    ) -> None:
        """The decision's audit row, in its transaction: both commit or neither (and one commit, not
        two, before the answer: the worker woken by the decision no longer races the audit write)."""
        self.audit.record(
            principal.tenant,
            principal.name,
            "approval.decide",
            link_id,
            "ok",
            tx=tx,
            channel=channel,
            decision=decision,
            request_id=request_id,
        )

    def _record(
        self, tx: ApplyTx, loaded: LoadedRun, cmd: DecideApproval, now: datetime, d: Definition
    ) -> RunState:
        """Decide `cmd` in the caller's transaction; the core's refusal becomes the API's error."""
        try:
            after, _events = self.kernel.apply(tx, loaded, cmd, now, d)
        except Rejected as r:
            raise _refusal(r) from None
        if after is None:  # pragma: no cover - a recorded decision always leaves a state
            raise Conflict("the decision was not recorded", code="not_waiting")
        return after

    def decide_in_session(
        self,
        principal: Principal,
        run_id: str,
        step: str,
        decision: str,
        comment: str | None = None,
        *,
        values: JSONObject | None = None,
    ) -> DecisionResult:
        """Decide from the inbox, as the logged-in approver, without a link (audited like decide)."""
        try:
            if decision not in ("approve", "reject"):
                raise InvalidInput(f"decision must be approve or reject, not {decision!r}")
            result = self._decide_in_session(principal, run_id, step, decision, comment, values, "inbox")
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
        return result

    def decide_by_request(
        self,
        principal: Principal,
        request_id: str,
        decision: str,
        comment: str | None = None,
        *,
        values: JSONObject | None = None,
    ) -> DecisionResult:
        """Decide request `request_id` over the API with the approver's own key, no link: the checks of
        the inbox (the approver re-read, the recorded policy, not the initiator unless it allows, one
        decision each) and an expired or settled request answered as such. Audited like decide."""
        run_id, step = _parts(request_id)
        try:
            if decision not in ("approve", "reject"):
                raise InvalidInput(f"decision must be approve or reject, not {decision!r}")
            if not run_id:
                raise NotFound(f"unknown approval request {request_id[:200]!r}", code="unknown_request")
            result = self._decide_in_session(
                principal, run_id, step, decision, comment, values, "api", request_id=request_id
            )
        except LockstepError as exc:
            self.principals.audit(
                principal.tenant,
                principal.name,
                "approval.decide",
                None,
                "refused",
                code=exc.code,
                channel="api",
                decision=decision,
                request_id=request_id[:200],
            )
            raise
        return result

    def _decide_in_session(
        self,
        principal: Principal,
        run_id: str,
        step: str,
        decision: str,
        comment: str | None,
        values: JSONObject | None,
        channel: str,
        request_id: str | None = None,
    ) -> DecisionResult:
        """Decide the request pending at `step` (from the inbox) or, over the API, the request
        `request_id` itself (then `step` is the one the id names)."""
        self.kernel.check_value(principal.tenant, comment, "max_payload_bytes", "the comment")
        self.kernel.check_value(principal.tenant, values, "max_payload_bytes", "the form's values")
        now = self.kernel.clock()
        with self.kernel.write() as tx:
            loaded = tx.load_run(run_id)
            if loaded is None or loaded.state.tenant != principal.tenant:
                raise self.kernel.missing(tx, run_id, principal.tenant)  # Gone if purged
            s = loaded.state
            a = approval_at(s, step) if request_id is None else approval_by_request(s, request_id)
            if a is None:
                if request_id is not None:
                    raise settled(s, step, request_id)
                raise Conflict(
                    f"run {run_id} is not waiting for an approval at step {step}", code="not_waiting"
                )
            if request_id is not None and a["expires_at"] <= iso(now):
                raise Gone(f"approval request {request_id} expired at {a['expires_at']}", code="expired")
            check_seat(principal, a)
            user = tx.user(principal.tenant, principal.name)
            if user is None or user.disabled:
                raise Forbidden(f"{principal.name} is disabled", code="disabled")
            d = self.kernel.definition_of(tx, s)
            cmd = DecideApproval(
                a["request_id"],
                user.name,
                decision,
                (comment or "")[:2000] or None,
                user.roles,
                user.groups,
                values=values,
            )
            check_form(a, values, decision)
            after = self._record(tx, loaded, cmd, now, d)
            self._audit_ok(tx, principal, None, channel, decision, a["request_id"])
        return _decided(after, a["request_id"], step, None, decision)


def check_form(a: JSONObject | None, values: JSONObject | None, decision: str) -> None:
    """Refuse values the request's form does not accept, naming each field and what is wrong (the core
    checks them again; this gives the caller the errors field by field)."""
    form = (a or {}).get("policy", {}).get("form")
    if not form:
        if values:
            raise InvalidInput("this approval step has no form: decide without values", code="no_form")
        return
    _clean, errors = check_values(form, values or {}, decision)
    if errors:
        listed = "; ".join(f"{k}: {v}" if k else v for k, v in errors.items())
        raise InvalidInput(
            f"the form's values were not accepted: {listed}", code="invalid_values", extra={"fields": errors}
        )


def settled(s: RunState, step: str, request_id: str) -> LockstepError:
    """Why request `request_id` of run `s` cannot be decided: it settled (timed out: Gone), or the run
    has no such pending request."""
    out = (s.steps.get(step) or StepState()).output if step else None
    if isinstance(out, dict) and out.get("request_id") == request_id:
        if out.get("outcome") == "timed_out":
            return Gone(f"approval request {request_id} expired before it was decided", code="expired")
        return Conflict(
            f"approval request {request_id} is closed: it was {out.get('outcome')}", code="not_waiting"
        )
    return Conflict(f"run {s.run_id} is not waiting for approval request {request_id}", code="not_waiting")


def check_seat(principal: Principal, a: JSONObject) -> None:
    """Refuse someone who may not decide `a` now: not an approver, or already decided."""
    if not principal.can("approve"):
        raise Forbidden(f"{principal.name} does not have the approver role", code="not_an_approver")
    prior = next((d for d in a["decisions"] if d["approver"] == principal.name), None)
    if prior is not None:
        raise Conflict(
            f"{principal.name} already decided {prior['decision']} at {prior['at']}",
            code="already_decided",
            extra={"decision": {"approver": principal.name, **prior}},
        )


def _decided(
    after: RunState, request_id: str, step: str, link_id: str | None, decision: str
) -> DecisionResult:
    """What a recorded decision answers: the request's state after it and the run's status."""
    pending = approval_by_request(after, request_id)
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


def _parts(request_id: str) -> tuple[str, str]:
    """(run id, step key) of a request id `<run id>/<step key>/r<n>`; ("", "") when it is not one."""
    parts = request_id.split("/")
    if len(parts) != 3 or not all(parts) or not parts[2].startswith("r") or len(request_id) > 400:
        return "", ""
    return parts[0], parts[1]


def _refusal(r: Rejected) -> LockstepError:
    if r.code in ("invalid_values", "no_form"):
        return InvalidInput(r.reason, code=r.code)
    if r.code == "already_decided":
        return Conflict(r.reason, code="already_decided")
    if r.code in ("not_an_approver", "initiator"):
        return Forbidden(r.reason, code=r.code)
    if r.code == "not_waiting":
        return Conflict(r.reason, code="not_waiting")
    return Refused(r.reason, code=r.code)
