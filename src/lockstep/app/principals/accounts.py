"""Tenants and users: creating them, their settings, roles, groups and credentials, and the audit log.

A credential change (a new password, a new API key, disabling the user) raises the user's credential
generation in the same transaction, which ends every session opened before it (see credentials.py).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TypedDict, Unpack

from ...core.canonical import JSONValue
from ...core.limits import TENANT_LIMITS
from ...core.timeutil import iso
from ...errors import Conflict, InvalidInput, NotFound
from ...store import AccountsTx, ConcurrencyError, TenantRow, UserRow
from ..audit import Audit, user_change
from ..port import KernelPort
from ..views import (
    EmailSet,
    GrantsChanged,
    KeyRotated,
    Membership,
    NewUser,
    PasswordSet,
    TenantSettings,
    TenantView,
    UserEnabled,
    UserView,
)
from .credentials import check_password_policy, hash_password, new_api_key, sha256_hex
from .roles import GRANTS, ROLES, Principal, check_name, principal_of

__all__ = ["DEFAULT_TENANT", "TENANT_SETTINGS", "Accounts", "UserChanges"]

# The tenant of every command that names none (the CLI's --tenant default, the example server).
DEFAULT_TENANT = "default"

TENANT_SETTINGS: dict[str, str] = {
    "max_active_runs": "non-terminal runs allowed at once (starts beyond it get 429)",
    "starts_per_second": "sustained run starts per second (a token bucket; bursts up to 2x, at least 1)",
    "max_steps": "steps per published definition",
    "activity_concurrency": "activity attempts of the tenant running at once (claims beyond it wait)",
    "unserved_after": "seconds a task may wait for a worker before it goes to the dead-letter state",
    "max_history_events": "events one run may record; a run reaching it is cancelled (runaway loops)",
    "max_run_seconds": "total time one run may take; a durable timer cancels it when it is reached",
    "max_timers": "durable timers the tenant may have armed; starts beyond it get 429",
    "retention": "seconds a finished run is kept after its terminal event; then the purge deletes it, "
    "leaving a tombstone (unset: kept forever; legal holds stop it)",
    # The size, depth and list bounds of values (core/limits.py: default and ceiling of each).
    **{
        n: f"{x.protects} ({x.unit}; default {x.default}, at most {x.ceiling})"
        for n, x in TENANT_LIMITS.items()
    },
}


class UserChanges(TypedDict, total=False):
    """What an administrator changes of a user (UserRow's fields)."""

    disabled: bool
    password_hash: str
    key_hash: str
    email: str
    roles: tuple[str, ...]
    groups: tuple[str, ...]


class Accounts:
    """Tenants and users (what an administrator manages), and the audit log."""

    def __init__(self, kernel: KernelPort[AccountsTx]) -> None:
        self.kernel = kernel
        # Changes of tenants and users are audited with `actor`: the CLI passes the operator at the
        # keyboard ($USER); the Python API may pass whoever it acts for (None: nobody named).
        self.log = Audit(kernel)

    # --- tenants -------------------------------------------------------------------------------
    def create_tenant(self, name: str, *, actor: str | None = None) -> TenantSettings:
        check_name("tenant", name)
        try:
            with self.kernel.write() as tx:
                tx.insert_tenant(name, {}, iso(self.kernel.clock()))
                self.log.record(name, actor, "tenant.create", name, "ok", tx=tx)
        except ConcurrencyError:
            raise Conflict(f"tenant {name} already exists") from None
        return TenantSettings(tenant=name, settings={})

    def set_tenant(self, name: str, *, actor: str | None = None, **changes: float | None) -> TenantSettings:
        unknown = sorted(set(changes) - set(TENANT_SETTINGS))
        if unknown:
            raise InvalidInput(
                f"unknown tenant setting(s) {', '.join(unknown)}; known: {', '.join(TENANT_SETTINGS)}"
            )
        for k, v in changes.items():
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or v <= 0):
                raise InvalidInput(f"{k} must be a positive number (or unset), got {v!r}")
            if k in TENANT_LIMITS and v is not None and (v != int(v) or v > TENANT_LIMITS[k].ceiling):
                ceiling = TENANT_LIMITS[k].ceiling
                raise InvalidInput(f"{k} must be a whole number of at most {ceiling}, got {v!r}")
        with self.kernel.write() as tx:
            row = self._existing(tx, name, actor)
            merged = {**row.settings, **changes}
            settings = {k: v for k, v in merged.items() if v is not None}
            tx.update_tenant_settings(name, settings)
            self.log.record(name, actor, "tenant.settings", name, "ok", tx=tx, changed=sorted(changes))
            if "retention" in changes and row.settings.get("retention") != settings.get("retention"):
                # What the purge may delete changes: audited with who, the old and the new value.
                detail = {"before": row.settings.get("retention"), "after": settings.get("retention")}
                tx.audit(iso(self.kernel.clock()), name, actor, "retention.set", name, "ok", detail)
        return TenantSettings(tenant=name, settings=settings)

    def _existing(self, tx: AccountsTx, name: str, actor: str | None) -> TenantRow:
        """The tenant's row. The `default` tenant exists before anyone creates it (definitions and runs
        work on it from the start), so its row is made, and audited, the first time one is needed;
        any other name must have been created (a typo must not make a tenant)."""
        row = tx.tenant(name)
        if row is None and name == DEFAULT_TENANT:
            created = iso(self.kernel.clock())
            tx.insert_tenant(name, {}, created)
            self.log.record(name, actor, "tenant.create", name, "ok", tx=tx, implicit=True)
            row = TenantRow(name, {}, None, None, created)
        if row is None:
            raise NotFound(f"tenant {name} does not exist; create it with `lockstep tenants create {name}`")
        return row

    def tenants(self) -> list[TenantView]:
        with self.kernel.read() as tx:
            rows = tx.tenants()
        return [TenantView(tenant=t.name, settings=t.settings, created_at=t.created_at) for t in rows]

    # --- users ---------------------------------------------------------------------------------
    def create_user(
        self, tenant: str, name: str, roles: list[str], groups: list[str], *, actor: str | None = None
    ) -> NewUser:
        """Create a user and return its API key: shown once, only its hash is stored."""
        check_name("user", name)
        bad = [r for r in roles if r not in ROLES]
        if bad or not roles:
            raise InvalidInput(
                f"unknown role(s) {', '.join(bad) or '(none given)'}; roles: {', '.join(ROLES)}"
            )
        for g in groups:
            check_name("group", g)
        key = new_api_key()
        with self.kernel.write() as tx:
            self._existing(tx, tenant, actor)
            try:
                tx.insert_user(
                    UserRow(
                        tenant,
                        name,
                        tuple(dict.fromkeys(roles)),
                        tuple(dict.fromkeys(groups)),
                        sha256_hex(key),
                        None,
                        False,
                        iso(self.kernel.clock()),
                    )
                )
            except ConcurrencyError:
                raise Conflict(f"user {name} already exists in tenant {tenant}") from None
            kept = {"roles": list(dict.fromkeys(roles)), "groups": list(dict.fromkeys(groups))}
            self.log.record(tenant, actor, "user.create", name, "ok", tx=tx, **kept)
        return NewUser(tenant=tenant, user=name, roles=roles, groups=groups, api_key=key)

    def _update(
        self,
        tenant: str,
        name: str,
        *,
        actor: str | None = None,
        end_sessions: bool = False,
        **changes: Unpack[UserChanges],
    ) -> UserRow:
        """Change a user; with `end_sessions` (a credential change) every session of theirs ends in the
        same transaction, and so does any session a login that checked the old credentials opens later."""
        with self.kernel.write() as tx:
            # First: it locks the user row (PostgreSQL), so the read below sees the latest one.
            if end_sessions and tx.end_sessions(tenant, name) is None:
                raise NotFound(f"no user {name} in tenant {tenant}")
            u = tx.user(tenant, name)
            if u is None:
                raise NotFound(f"no user {name} in tenant {tenant}")
            u = replace(u, **changes)
            tx.update_user(u)
            action, detail = user_change(dict(changes))
            self.log.record(tenant, actor, action, name, "ok", tx=tx, **detail)
            return u

    def disable_user(self, tenant: str, name: str, *, actor: str | None = None) -> UserEnabled:
        self._update(tenant, name, actor=actor, end_sessions=True, disabled=True)
        return UserEnabled(tenant=tenant, user=name, disabled=True)

    def enable_user(self, tenant: str, name: str, *, actor: str | None = None) -> UserEnabled:
        self._update(tenant, name, actor=actor, disabled=False)
        return UserEnabled(tenant=tenant, user=name, disabled=False)

    def set_password(self, tenant: str, name: str, password: str, *, actor: str | None = None) -> PasswordSet:
        check_password_policy(password, tenant=tenant, user=name, limits=self.kernel.server_limits)
        self._update(tenant, name, actor=actor, end_sessions=True, password_hash=hash_password(password))
        return PasswordSet(tenant=tenant, user=name, password="set", sessions="ended")  # noqa: S106 - not one

    def set_email(self, tenant: str, name: str, email: str, *, actor: str | None = None) -> EmailSet:
        if not re.match(r"^[^@\s]+@[^@\s]+\.[^@\s]+$", email):
            raise InvalidInput(f"{email!r} is not an e-mail address")
        self._update(tenant, name, actor=actor, email=email)
        return EmailSet(tenant=tenant, user=name, email=email)

    def rotate_key(self, tenant: str, name: str, *, actor: str | None = None) -> KeyRotated:
        key = new_api_key()
        self._update(tenant, name, actor=actor, end_sessions=True, key_hash=sha256_hex(key))
        return KeyRotated(tenant=tenant, user=name, api_key=key, sessions="ended")

    def set_membership(
        self,
        tenant: str,
        name: str,
        *,
        roles: list[str] | None = None,
        groups: list[str] | None = None,
        actor: str | None = None,
    ) -> Membership:
        changes: UserChanges = {}
        if roles is not None:
            bad = [r for r in roles if r not in ROLES]
            if bad:
                raise InvalidInput(f"unknown role(s) {', '.join(bad)}; roles: {', '.join(ROLES)}")
            changes["roles"] = tuple(roles)
        if groups is not None:
            changes["groups"] = tuple(groups)
        u = self._update(tenant, name, actor=actor, **changes)
        return Membership(tenant=tenant, user=name, roles=list(u.roles), groups=list(u.groups))

    def set_grant(
        self, tenant: str, name: str, grant: str, *, granted: bool, by: str | None = None
    ) -> GrantsChanged:
        """Give a user a grant (or take it back): audited, effective on their next request."""
        if grant not in GRANTS:
            raise InvalidInput(f"unknown grant {grant!r}; grants: {', '.join(GRANTS)}")
        with self.kernel.write() as tx:
            u = tx.user(tenant, name)
            if u is None:
                raise NotFound(f"no user {name} in tenant {tenant}")
            grants = tuple(g for g in u.grants if g != grant) + ((grant,) if granted else ())
            tx.update_user(replace(u, grants=grants))
            action = "user.grant" if granted else "user.revoke"
            tx.audit(iso(self.kernel.clock()), tenant, by, action, name, "ok", {"grant": grant})
        return GrantsChanged(tenant=tenant, user=name, grants=list(grants))

    def users(self, tenant: str) -> list[UserView]:
        with self.kernel.read() as tx:
            rows = tx.users(tenant)
        return [
            UserView(
                user=u.name,
                roles=list(u.roles),
                groups=list(u.groups),
                disabled=u.disabled,
                password=u.password_hash is not None,
                created_at=u.created_at,
                grants=list(u.grants),
            )
            for u in rows
        ]

    def principal(self, tenant: str, name: str) -> Principal | None:
        """The user as they are now (None if missing or disabled)."""
        with self.kernel.read() as tx:
            u = tx.user(tenant, name)
        if u is None or u.disabled:
            return None
        return principal_of(u)

    def audit(
        self,
        tenant: str | None,
        actor: str | None,
        action: str,
        target: str | None,
        outcome: str,
        **detail: JSONValue,
    ) -> None:
        """One audit row in its own transaction: Audit.record (app/audit.py), kept for its callers."""
        self.log.record(tenant, actor, action, target, outcome, **detail)
