"""The audit log (part of the application service layer): writing a row, reading it back a page at a time
with filters, exporting it, and verifying its hash chains (core/auditchain.py).

Every feature that audits calls `Audit.record` (in the transaction of the change it records when it has
one: `tx=`), or `Audit.command` for a state-machine command on a run: then the row is written in the
command's own transaction, and a refusal is recorded as such. The action names are in ACTIONS (and in
docs/security.md). Readers see one tenant's rows only; the rows without a tenant are the operator's.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from ..core.auditchain import ChainCheck, StoredAudit, chain_of
from ..core.canonical import canonical_json
from ..core.commands import Command
from ..core.events import Event
from ..core.state import RunState
from ..core.timeutil import iso
from ..errors import Conflict, Forbidden, Gone, InvalidInput, NotFound, Refused
from ..store import AuditFilter, AuditTx, LoadedRun
from .port import KernelPort
from .views import AuditChainCheck, AuditEntry, AuditPage, AuditProblem, AuditVerifyResult

__all__ = [
    "ACTIONS",
    "DEFAULT_PAGE",
    "MAX_PAGE",
    "OUTCOMES",
    "Audit",
    "audit_filter",
    "decode_cursor",
    "encode_cursor",
    "user_change",
]

# Every action name written to the audit log, and what it records. Names are `area.verb`; a reader can
# ask for one (`repair.pause`) or for an area (`repair.`). Names marked (planned) are reserved for the
# parts of issue 16 built beside this one: they call Audit.record with exactly these names.
ACTIONS: dict[str, str] = {
    "ui.login": "a login to the UI with a password or an API key: ok, refused (wrong credentials) or "
    "throttled (locked out before the password was checked)",
    "api.request": "an API request refused: an API key that matches no enabled user (401) or a role "
    "without the route's permission (403); target is the route",
    "ui.page": "a UI page refused for the user's roles (403); target is the page",
    "approval.decide": "a decision on an approval (link, page or inbox), every attempt",
    "approval.link_mint": "an approval link minted for an approver (the token itself is never recorded)",
    "approval.link_revoke": "an approval link revoked",
    "approval.reassign": "an approver replaced by another",
    "webhook.create": "a run-webhook subscription created (its URL and events; the signing secret is never "
    "recorded)",
    "webhook.replay": "a webhook delivery sent again on an admin's request",
    "event.publish": "an external event sent by a publisher (POST /v1/events): accepted, or refused with "
    "its code (payload_invalid, id_reused, buffer_full, invalid_input); target is the event id",
    "event.replay": "an event id sent again: answered with the first result, delivered to nobody again",
    "event.resume": "an event id sent again whose first delivery was cut off: the delivery is finished",
    "event.deliver": "an event delivered to one waiting run (target), or refused by it (stale_wait)",
    "event.callback_mint": "a callback URL minted for a waiting step (the token itself is never recorded)",
    "event.callback": "a callback posted: accepted, or refused with its code (unknown_callback, "
    "already_used, expired, replaced, stale, bad_signature, payload_invalid)",
    "integration.set": "an integration's signing secret stored or replaced (never the secret)",
    "run.cancel": "a run cancelled by a user",
    "run.retry": "a step waiting for an operator run again",
    "run.damaged": "a run the background scrub found damaged and marked (actor scrub; the problems "
    "verify found): every command on it is refused from then on",
    "repair.pause": "a run paused",
    "repair.resume": "a paused run resumed",
    "repair.skip": "a step skipped (or proposed for skipping, four-eyes)",
    "repair.edit_input": "a run's input replaced (the values are in the run's history, not here)",
    "repair.resolve": "a step of unknown outcome settled",
    "repair.migrate": "a run moved to another definition version (dry runs are not recorded)",
    "repair.confirm": "a four-eyes proposal confirmed by a second operator",
    "repair.reject": "a four-eyes proposal rejected or withdrawn",
    "migration.request": "a migration that needs approval asked for (one request for a run or a bulk "
    "batch: its runs, versions and reason); nothing is migrated yet; target is the request id",
    "migration.decide": "a decision on a migration request by an approver, every attempt (refused ones with "
    "their code: requester, not_an_approver, already_decided, expired, not_waiting, unknown_request)",
    "migration.reject": "a migration request refused by its approvers (the reject quorum met): no run "
    "changed",
    "migration.expire": "a migration request expired undecided (on a late decision or by the scheduler): no "
    "run changed",
    "migration.apply": "one run of a granted migration request migrated (ok), or reported and left as it "
    "is (refused, with why: it finished or moved meanwhile); target is the run",
    "audit.export": "an export of the audit log (API or CLI), with its filters",
    "tenant.create": "a tenant created (CLI or Python API: no actor)",
    "tenant.settings": "a tenant's limits or quotas changed (the names of the settings)",
    "user.create": "a user created, with their roles and groups (never the API key)",
    "user.membership": "a user's roles or groups changed (the new ones)",
    "user.password": "a user's password set (never the password; their sessions end)",
    "user.key_rotate": "a user's API key replaced (never the key; their sessions end)",
    "user.email": "a user's e-mail address changed",
    "user.disable": "a user disabled (their sessions end)",
    "user.enable": "a user enabled again",
    "user.update": "a user changed otherwise (the names of the fields changed)",
    "sensitive.read": "sensitive values shown in clear (a reveal of a run or its events): ok, refused "
    "(without the read_sensitive grant, or as no enabled user), or failed; target is the run; the "
    "labels, never the values",
    "user.grant": "a grant (read_sensitive) given to a user",
    "user.revoke": "a grant taken back from a user",
    "keys.init": "a key-encryption key file created (`lockstep keys init`)",
    "keys.status": "the key status read (`lockstep keys status`)",
    "keys.create": "a tenant's first data key created, on its first sealed value",
    "keys.rotate": "a tenant's data key rotated: a new version for new run keys",
    "keys.rewrap": "a batch of run keys re-wrapped under the tenant's newest key version (scheduler)",
    "keys.retire": "an old tenant key version deleted once no run key uses it",
    "keys.forget": "a finished run's data key destroyed (`lockstep runs forget`)",
    "keys.shred": "a tenant's data keys destroyed (`lockstep tenants shred`)",
    "tenant.shred": "a tenant shredded: every data key of it destroyed, with the reason",
    "retention.set": "a tenant's retention changed, with the value before and after",
    "retention.hold": "a legal hold placed on a run or a tenant, with its reason",
    "retention.release": "a legal hold released, with its reason",
    "retention.purge": "finished runs purged (a pass, per tenant with the run ids; or one operator's run)",
    "retention.drop_partition": "a PostgreSQL event partition dropped whole, all its runs purged",
    "schedule.create": "a schedule created: its definition, version, cron, zone and policies (never its "
    "input)",
    "schedule.update": "a schedule changed: the names of the fields changed and the new values (never the "
    "input)",
    "schedule.pause": "a schedule paused, with the reason (also by the scheduler, when a schedule can no "
    "longer be read)",
    "schedule.resume": "a paused schedule resumed, with its next fire time",
    "schedule.delete": "a schedule deleted (the runs it started are kept), with how many it started",
    "schedule.trigger": "a run started by hand from a schedule, with its run and start key",
    "secret.set": "a secret's value set: its new version (never the value)",
    "secret.delete": "a secret deleted (one version, or all of them and its data key destroyed)",
    "secret.use": "an http step refused a secret (none of that name in the run's tenant, a version "
    "gone, its key destroyed); target is the secret, with the run and step",
    "egress.set": "a tenant's egress policy replaced: the new allowed prefixes, hosts and flags",
    "egress.refuse": "an http step's request refused by the egress policy or the address checks "
    "(SSRF); target is the URL without its query, with the run, step and reason",
}
OUTCOMES = ("ok", "refused", "throttled", "failed")
MAX_PAGE = 500
DEFAULT_PAGE = 50
_ACTION = re.compile(r"^[a-z][a-z0-9_-]*(?:\.[a-z0-9_-]+)*(?P<prefix>\.\*?)?$")
_MAX_TEXT = 500  # a detail's string is cut to this many characters (reasons can be 64 KiB)
_CURSOR = "audit:"


def _instant(text: str, where: str) -> str:
    try:
        dt = datetime.fromisoformat(text.strip().replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(
            f"{where}: {text[:60]!r} is not a time; write an RFC 3339 timestamp such as "
            f"2025-06-01T12:00:00Z (without an offset the time is taken as UTC)",
            code="bad_filter",
        ) from None
    return iso(dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC))


def audit_filter(
    *,
    actor: str | None = None,
    action: str | None = None,
    outcome: str | None = None,
    since: str | None = None,
    until: str | None = None,
) -> AuditFilter:
    """The filters of a reader, checked: each refusal names the filter, what is wrong and what to write."""
    if actor is not None and not 0 < len(actor) <= 200:
        raise InvalidInput("actor: give a user name of 1 to 200 characters", code="bad_filter")
    exact = prefix = None
    if action:
        m = _ACTION.match(action)
        if m is None:
            raise InvalidInput(
                f"action: {action[:60]!r} is neither an action name nor a prefix; write a name such as "
                f"repair.pause or a prefix ending in '.' such as repair. (names: docs/security.md)",
                code="bad_filter",
            )
        if m.group("prefix"):
            prefix = action.removesuffix("*")
        else:
            exact = action
    if outcome and outcome not in OUTCOMES:
        raise InvalidInput(
            f"outcome: {outcome[:60]!r} is not an outcome; use one of {', '.join(OUTCOMES)}",
            code="bad_filter",
        )
    lo = _instant(since, "since") if since else None
    hi = _instant(until, "until") if until else None
    if lo is not None and hi is not None and lo >= hi:
        raise InvalidInput(
            f"since ({lo}) is not before until ({hi}): swap them, or widen the range", code="bad_filter"
        )
    return AuditFilter(actor or None, exact, prefix, outcome or None, lo, hi)


def encode_cursor(row_id: int) -> str:
    return base64.urlsafe_b64encode(f"{_CURSOR}{row_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    bad = InvalidInput(
        f"cursor: {cursor[:60]!r} is not a cursor this server gave out; pass the `next` value of the "
        f"previous page unchanged, or leave it out to start from the newest row",
        code="bad_cursor",
    )
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise bad from None
    number = text.removeprefix(_CURSOR)
    if not text.startswith(_CURSOR) or not number.isdigit() or len(number) > 18:
        raise bad
    return int(number)


def _check_limit(limit: int) -> int:
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(f"limit: {limit} is out of range; ask for 1 to {MAX_PAGE} rows", code="bad_filter")
    return limit


def _bounded(value: Any) -> Any:
    """A detail value as the log keeps it: long text cut, anything but a scalar or a flat list as JSON."""
    if isinstance(value, str):
        return value if len(value) <= _MAX_TEXT else value[:_MAX_TEXT] + "…"
    if value is None or isinstance(value, int | float | bool):
        return value
    if isinstance(value, list | tuple) and all(
        v is None or isinstance(v, str | int | float | bool) for v in value
    ):
        return [_bounded(v) for v in value]
    try:
        return _bounded(canonical_json(value))
    except (TypeError, ValueError):
        return _bounded(repr(value))


# What a change of a user is called in the audit log: the first of these fields it touches.
_USER_ACTIONS = (
    ("disabled", "user.disable"),
    ("password_hash", "user.password"),
    ("key_hash", "user.key_rotate"),
    ("email", "user.email"),
    ("roles", "user.membership"),
    ("groups", "user.membership"),
)


def user_change(changes: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The action and detail of a change of a user: the names of the fields changed and the new roles
    and groups, never a hash or a secret."""
    if changes.get("disabled") is False:
        action = "user.enable"
    else:
        action = next((a for field, a in _USER_ACTIONS if field in changes), "user.update")
    detail: dict[str, Any] = {"changed": sorted(changes)}
    for field in ("roles", "groups"):
        if field in changes:
            detail[field] = list(changes[field])
    return action, detail


class Audit:
    def __init__(self, kernel: KernelPort[AuditTx]) -> None:
        self.kernel = kernel

    # --- writing ---------------------------------------------------------------------------------
    def record(
        self,
        tenant: str | None,
        actor: str | None,
        action: str,
        target: str | None,
        outcome: str,
        /,
        *,
        tx: AuditTx | None = None,
        **detail: Any,
    ) -> None:
        """Write one audit row: in `tx` (the transaction of the change it records), or in its own.
        `detail` never holds a secret (the store refuses keys like password or token)."""
        at = iso(self.kernel.clock())
        kept = {k: _bounded(v) for k, v in detail.items()}
        if tx is not None:
            tx.audit(at, tenant, actor, action, target, outcome, kept)
            return
        with self.kernel.write() as own:
            own.audit(at, tenant, actor, action, target, outcome, kept)

    def command(
        self,
        tenant: str,
        actor: str | None,
        action: str,
        run_id: str,
        command: Command,
        /,
        **detail: Any,
    ) -> tuple[RunState, list[Event]]:
        """`kernel.command` with its audit row in the same transaction; a refusal (the state machine's,
        a run of another tenant, a purged run) is recorded as refused, with its code, and raised."""

        def with_row(tx: AuditTx, loaded: LoadedRun) -> Command:
            self.record(tenant, actor, action, run_id, "ok", tx=tx, **detail)
            return command

        try:
            return self.kernel.command(run_id, command, tenant, prepare=with_row)
        except (Refused, Conflict, NotFound, Forbidden, Gone) as exc:  # Gone: a purged run
            self.refused(tenant, actor, action, run_id, exc.code, **detail)
            raise

    def refused(
        self,
        tenant: str | None,
        actor: str | None,
        action: str,
        target: str | None,
        code: str,
        /,
        **detail: Any,
    ) -> None:
        self.record(tenant, actor, action, target, "refused", code=code, **detail)

    # --- reading ---------------------------------------------------------------------------------
    def page(
        self,
        tenant: str | None,
        where: AuditFilter | None = None,
        *,
        cursor: str | None = None,
        limit: int = DEFAULT_PAGE,
    ) -> AuditPage:
        """One page of `tenant`'s rows (None: the rows without a tenant), newest first. A cursor stays
        valid while rows are added: a tenant's rows get their ids in commit order, so a page never
        gains a row after it was read."""
        before = decode_cursor(cursor) if cursor else None
        rows = self._rows(tenant, where or AuditFilter(), before, _check_limit(limit))
        items = [AuditEntry.of(r) for r in rows]
        more = len(items) == limit
        return AuditPage(items=items, next=encode_cursor(items[-1].id) if more else None)

    def _rows(
        self, tenant: str | None, where: AuditFilter, before: int | None, limit: int
    ) -> list[StoredAudit]:
        with self.kernel.read() as tx:
            return tx.audit_page(tenant, where, before, limit)

    def export(
        self,
        tenant: str | None,
        where: AuditFilter | None = None,
        *,
        limit: int | None = None,
        page_size: int = MAX_PAGE,
    ) -> Iterator[AuditEntry]:
        """Every matching row, newest first, read a page at a time (one short read transaction each):
        memory stays bounded and no transaction stays open while the reader is slow."""
        where = where or AuditFilter()
        before: int | None = None
        left = limit
        while left is None or left > 0:
            size = page_size if left is None else min(page_size, left)
            rows = self._rows(tenant, where, before, size)
            for r in rows:
                yield AuditEntry.of(r)
            if len(rows) < size:
                return
            before = rows[-1].id
            if left is not None:
                left -= len(rows)

    # --- verification ----------------------------------------------------------------------------
    def verify(self, tenant: str | None = None, *, untenanted: bool = True) -> AuditVerifyResult:
        """Check every row's hash and link and each chain's end against its head: `tenant`'s chain (and,
        with `untenanted`, the rows without a tenant), or every chain when `tenant` is None."""
        if tenant is not None:
            chains = [chain_of(tenant), *([""] if untenanted else [])]
        else:
            with self.kernel.read() as tx:
                chains = sorted({h.chain for h in tx.audit_heads()} | set(tx.audit_chains_with_rows()))
        checked = [self._check(chain) for chain in chains]
        return AuditVerifyResult(
            rows=sum(c.rows for c in checked), ok=all(c.ok for c in checked), chains=checked
        )

    def _check(self, chain: str, page_size: int = 1000) -> AuditChainCheck:
        check = ChainCheck(chain)
        with self.kernel.read() as tx:
            tx.audit_snapshot()  # the head and the rows as of one moment, while writers go on
            head = tx.audit_head(chain)
            after = 0
            while True:
                rows = tx.audit_chain_rows(chain, after, page_size)
                for row in rows:
                    check.feed(row)
                if len(rows) < page_size:
                    break
                after = rows[-1].id
        check.finish(head)
        return AuditChainCheck(
            tenant=chain or None,
            rows=check.rows,
            head=head.last_hash if head is not None and head.rows else None,
            ok=not check.problems,
            problems=[AuditProblem(id=i, problem=p) for i, p in check.problems],
        )
