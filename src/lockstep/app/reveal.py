"""Revealing sealed values to a person: only to a user holding the `read_sensitive` grant (besides the
right to read runs), only on an explicit request, and every request, allowed or refused, is written to
the audit log (who, which run, which fields: never a value). Everyone else sees redaction markers.

Approvers are the one exception to "besides the right to read runs": an approver the request's policy
admits, holding the grant, may reveal that request's details (what they decide on), nothing else of the
run."""

from __future__ import annotations

from ..core.canonical import JSONValue
from ..core.lanes import approval_at
from ..core.sealed import READ_GRANT, map_markers, marker_parts
from ..core.state import RunState
from ..errors import Forbidden, LockstepError, NotFound
from .approvals import Approvals
from .kernel import Kernel
from .principals import Principal, Principals
from .runs import Runs
from .views import ApprovalPage, EventView, RunView

__all__ = ["Reveal"]


def _labels(value: JSONValue) -> list[str]:
    """The labels (fields) of the markers in `value`, for the audit row."""
    found: list[str] = []

    def seen(marker: dict[str, JSONValue]) -> JSONValue:
        try:
            parts = marker_parts(marker)
        except ValueError:
            parts = None
        found.append(parts[0] if parts else "?")
        return marker

    map_markers(value, seen)
    return sorted(set(found))


class Reveal:
    def __init__(self, kernel: Kernel, runs: Runs, principals: Principals, approvals: Approvals) -> None:
        self.kernel = kernel
        self.runs = runs
        self.principals = principals
        self.approvals = approvals

    def run(self, principal: Principal, run_id: str, *, channel: str = "api") -> RunView:
        """The run with its sealed values opened (those of a forgotten run stay redacted)."""
        stored = self._allowed(principal, run_id, channel, "run")
        raw = stored.to_json(copy_values=False)
        labels = _labels(raw)
        if not labels:
            return self.runs.describe(stored)
        try:
            with self.kernel.read() as tx:
                opened = self.kernel.opened(tx, stored.tenant, run_id, raw)
        except LockstepError as exc:  # no key, another key, a moved value: a reveal that failed
            self._audit(principal, run_id, "failed", channel=channel, what="run", code=exc.code)
            raise
        self._audit(principal, run_id, "ok", channel=channel, what="run", labels=labels)
        return self.runs.describe(RunState.from_json(opened))

    def events(self, principal: Principal, run_id: str, *, channel: str = "api") -> list[EventView]:
        """The run's history with its sealed values opened."""
        self._allowed(principal, run_id, channel, "events")
        labels: set[str] = set()

        def opener(data: JSONValue) -> JSONValue:
            found = _labels(data)
            if not found:
                return data
            labels.update(found)
            with self.kernel.read() as tx:
                return self.kernel.opened(tx, principal.tenant, run_id, data)

        try:
            out = self.runs.events(principal.tenant, run_id, opener)
        except LockstepError as exc:
            self._audit(principal, run_id, "failed", channel=channel, what="events", code=exc.code)
            raise
        if labels:
            self._audit(principal, run_id, "ok", channel=channel, what="events", labels=sorted(labels))
        return out

    def approval(self, principal: Principal, run_id: str, step: str, *, channel: str = "ui") -> ApprovalPage:
        """The approval page of the request at `step` with its details opened, for an approver the policy
        admits (the same checks, and the same answers, as the page itself) who holds the grant."""
        shown = self.approvals.request_view(principal, run_id, step)
        try:
            self._require_grant(principal)
        except LockstepError as exc:
            self._audit(principal, run_id, "refused", channel=channel, what="approval", code=exc.code)
            raise
        request = approval_at(self.kernel.state(principal.tenant, run_id), step)
        details = request.get("details") if request is not None else None
        labels = _labels(details)
        if not labels or not isinstance(shown.approval, dict):  # nothing sealed, or not pending
            return shown
        try:
            with self.kernel.read() as tx:
                opened = self.kernel.opened(tx, principal.tenant, run_id, details)
        except LockstepError as exc:
            self._audit(principal, run_id, "failed", channel=channel, what="approval", code=exc.code)
            raise
        self._audit(principal, run_id, "ok", channel=channel, what="approval", step=step, labels=labels)
        approval = {**shown.approval, "details": opened}
        return shown.model_copy(update={"approval": approval})

    @staticmethod
    def _require_grant(principal: Principal) -> None:
        if not principal.can(READ_GRANT):
            how = f"`lockstep users grant {principal.name} {READ_GRANT}`"
            raise Forbidden(
                f"user {principal.name} does not have the {READ_GRANT} grant: sensitive values stay "
                f"redacted (an admin grants it with {how})",
                code="no_read_sensitive",
            )

    def as_user(
        self, tenant: str, name: str | None, run_id: str, *, what: str, channel: str, hint: str
    ) -> Principal:
        """The enabled user `name` of `tenant` a reveal of `run_id` is made as, where the caller names
        the user rather than authenticating them (the command line's --as or $USER). No such user:
        Forbidden, audited like every refused reveal (the run, what was asked for, the channel), so the
        log names the run whether or not the user exists; `hint` says how to name one."""
        p = self.principals.principal(tenant, name) if name else None
        if p is None:
            code = "no_such_user"
            self.principals.audit(
                tenant,
                name or None,
                "sensitive.read",
                run_id,
                "refused",
                channel=channel,
                what=what,
                code=code,
            )
            raise Forbidden(
                f"a reveal needs a user of tenant {tenant} with the {READ_GRANT} grant: no enabled user "
                f"{name or '(none given)'}; {hint}",
                code=code,
            )
        return p

    def _allowed(self, principal: Principal, run_id: str, channel: str, what: str) -> RunState:
        """The run as stored, if `principal` may reveal it; else Forbidden (audited as refused)."""
        try:
            principal.require("read")
            self._require_grant(principal)
            return self.kernel.state(principal.tenant, run_id)
        except NotFound:
            raise
        except LockstepError as exc:
            self._audit(principal, run_id, "refused", channel=channel, what=what, code=exc.code)
            raise

    def _audit(self, principal: Principal, run_id: str, outcome: str, **detail: JSONValue) -> None:
        self.principals.audit(principal.tenant, principal.name, "sensitive.read", run_id, outcome, **detail)
