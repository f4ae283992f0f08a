"""Who in a tenant can decide an approval step's requests, and what to tell people when nobody can (or
fewer than the quorum): a warning when the definition is published, and again in the request when a
run makes it (the core records it in ApprovalRequested: see Kernel.apply).

Someone can decide when their account exists in the tenant, is enabled, has a role that may approve,
and is listed by name or belongs to a listed group (and, for a run's request, did not start the run
unless the step allows the initiator): what app/approvals checks again when they decide.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from ..core.definition import ApprovalStep, Definition, MigrationApproval
from ..core.events import ApprovalRequested, Event
from ..core.expr import compile_template
from ..store import PrincipalsTx, UserRow
from .principals.roles import Principal

__all__ = ["approval_notes", "approver_warnings", "migration_approver_warnings"]


def approval_notes(tx: PrincipalsTx, tenant: str, d: Definition, events: list[Event]) -> Definition | None:
    """When `events` request approvals that their approvers cannot give in the tenant as it is now, the
    definition to decide again with (its `approver_warnings` say why, and the requests record it);
    None when there is nothing to say. Reads the tenant's users only when a request is made."""
    asked = [e.data for e in events if isinstance(e.data, ApprovalRequested)]
    if not asked:
        return None
    accounts = tx.users(tenant)
    notes: dict[str, tuple[str, ...]] = {}
    for r in asked:
        step = d.step(r.step) if d.has_step(r.step) else None  # a migration requests under its target
        if isinstance(step, ApprovalStep):
            found = approver_warnings(tenant, step, accounts, r.initiator)
            if found:
                notes[step.id] = tuple(found)
    return replace(d, approver_warnings=notes) if notes else None


def migration_approver_warnings(tenant: str, m: MigrationApproval, accounts: Iterable[UserRow]) -> list[str]:
    """The same for a definition's `migration: requires_approval` (nobody is an initiator: the operator
    who asks is left out when the request is decided)."""
    as_step = ApprovalStep(
        id="migration",
        next=None,
        users=m.users,
        groups=m.groups,
        quorum=m.quorum,
        reject_quorum=m.reject_quorum,
        timeout=m.timeout,
        on_timeout="expire",
        on_reject="fail",
        allow_initiator=True,
        details=compile_template(""),
    )
    return approver_warnings(tenant, as_step, accounts)


def approver_warnings(
    tenant: str, step: ApprovalStep, accounts: Iterable[UserRow], initiator: str | None = None
) -> list[str]:
    """What stands between `step`'s approvers and a decision, one line each; [] when the quorum of its
    approvers can decide. `initiator`: who started the run, when a request is being made."""
    by_name = {u.name: u for u in accounts}
    out: list[str] = []
    able: set[str] = set()
    for name in step.users:
        u = by_name.get(name)
        if u is None:
            out.append(f"no user {name} in tenant {tenant}")
        elif why := _cannot(u, step, initiator):
            out.append(f"user {name} {why}")
        else:
            able.add(name)
    for group in step.groups:
        members = [u for u in by_name.values() if group in u.groups]
        deciders = {u.name for u in members if not _cannot(u, step, initiator)}
        able |= deciders
        if not members:
            out.append(f"no user in group {group} of tenant {tenant}")
        elif not deciders:
            shown = ", ".join(sorted(u.name for u in members)[:5])
            out.append(
                f"nobody in group {group} can decide ({shown}: disabled, without the approver role, "
                f"or the run's initiator)"
            )
    if not able:
        out.append(
            f"nobody can approve: the request waits until it times out (on_timeout: {step.on_timeout}); "
            "create the users or give them the approver role"
        )
    elif len(able) < step.quorum:
        out.append(
            f"only {len(able)} of the approvers can decide ({', '.join(sorted(able))}), fewer than the "
            f"quorum of {step.quorum}: the request can never be granted"
        )
    return out


def _cannot(u: UserRow, step: ApprovalStep, initiator: str | None) -> str:
    """Why this account cannot decide (empty: it can)."""
    if u.disabled:
        return "is disabled"
    if not Principal(u.tenant, u.name, u.roles, u.groups).can("approve"):
        roles = ", ".join(u.roles) or "none"
        return f"has no role that may approve (roles: {roles}): give them the approver role"
    if initiator is not None and u.name == initiator and not step.allow_initiator:
        return "started the run and the step does not allow the initiator to decide"
    return ""
