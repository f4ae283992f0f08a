"""Tenants, users, API keys, passwords and UI sessions (part of the application service layer).

Secrets are never stored: API keys (256 random bits) are kept as sha256 hashes, passwords as scrypt
hashes, session cookies as sha256 hashes. Every check re-reads the user, so disabling a user or changing
their roles takes effect on their next request.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from .core.limits import TENANT_LIMITS
from .core.timeutil import iso
from .errors import Conflict, Forbidden, InvalidInput, NotFound
from .service import Service
from .store import ConcurrencyError, UserRow

__all__ = ["ROLES", "TENANT_SETTINGS", "Principal", "Principals"]

ROLES = ("admin", "operator", "approver", "viewer", "worker")
NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9_.-]{0,62}[a-z0-9])?$")
KEY_PREFIX = "lsk_"
SESSION_TTL = timedelta(hours=12)
TENANT_SETTINGS: dict[str, str] = {
    "max_active_runs": "non-terminal runs allowed at once (starts beyond it get 429)",
    "starts_per_second": "sustained run starts per second (a token bucket; bursts up to 2x, at least 1)",
    "max_steps": "steps per published definition",
    "activity_concurrency": "activity attempts of the tenant running at once (claims beyond it wait)",
    "unserved_after": "seconds a task may wait for a worker before it goes to the dead-letter state",
    "max_history_events": "events one run may record; a run reaching it is cancelled (runaway loops)",
    "max_run_seconds": "total time one run may take; a durable timer cancels it when it is reached",
    "max_timers": "durable timers the tenant may have armed; starts beyond it get 429",
    # The size, depth and list bounds of values (core/limits.py: default and ceiling of each).
    **{
        n: f"{x.protects} ({x.unit}; default {x.default}, at most {x.ceiling})"
        for n, x in TENANT_LIMITS.items()
    },
}
# Permissions by role. `approver` and `worker` see no runs: they act only through their own endpoints.
PERMISSIONS: dict[str, frozenset[str]] = {
    "admin": frozenset({"read", "start", "cancel", "publish", "operate"}),
    "operator": frozenset({"read", "start", "cancel", "operate"}),
    "viewer": frozenset({"read"}),
    "approver": frozenset({"approve"}),
    "worker": frozenset({"work"}),
}


@dataclass(frozen=True)
class Principal:
    tenant: str
    name: str
    roles: tuple[str, ...]
    groups: tuple[str, ...]

    def can(self, permission: str) -> bool:
        return any(permission in PERMISSIONS.get(r, frozenset()) for r in self.roles)

    def require(self, permission: str) -> None:
        if not self.can(permission):
            raise Forbidden(
                f"user {self.name} (roles: {', '.join(self.roles) or 'none'}) may not {permission} "
                f"in tenant {self.tenant}"
            )


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _hash_password(password: str, salt: bytes | None = None) -> str:
    salt = salt or secrets.token_bytes(16)
    dk = hashlib.scrypt(password.encode(), salt=salt, n=2**14, r=8, p=1, dklen=32)
    return f"scrypt$16384$8$1${salt.hex()}${dk.hex()}"


def _check_password(password: str, stored: str | None) -> bool:
    if not stored:
        _hash_password(password, b"\0" * 16)  # same work either way: no timing hint that the user exists
        return False
    _alg, n, r, p, salt, dk = stored.split("$")
    got = hashlib.scrypt(password.encode(), salt=bytes.fromhex(salt), n=int(n), r=int(r), p=int(p), dklen=32)
    return hmac.compare_digest(got.hex(), dk)


def _check_name(kind: str, name: str) -> None:
    if not NAME_RE.match(name):
        raise InvalidInput(
            f"{kind} name {name!r} is invalid: use lowercase letters, digits, '.', '_' and '-'"
        )


class Principals:
    def __init__(self, service: Service) -> None:
        self.service = service

    # --- tenants -------------------------------------------------------------------------------
    def create_tenant(self, name: str) -> dict[str, Any]:
        _check_name("tenant", name)
        try:
            with self.service.write() as tx:
                tx.insert_tenant(name, {}, iso(self.service.clock()))
        except ConcurrencyError:
            raise Conflict(f"tenant {name} already exists") from None
        return {"tenant": name, "settings": {}}

    def set_tenant(self, name: str, **changes: Any) -> dict[str, Any]:
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
        with self.service.write() as tx:
            row = tx.tenant(name)
            if row is None:
                raise NotFound(
                    f"tenant {name} does not exist; create it with `lockstep tenants create {name}`"
                )
            settings = {**row.settings, **changes}
            settings = {k: v for k, v in settings.items() if v is not None}
            tx.update_tenant_settings(name, settings)
        return {"tenant": name, "settings": settings}

    def tenants(self) -> list[dict[str, Any]]:
        with self.service.read() as tx:
            return [
                {"tenant": t.name, "settings": t.settings, "created_at": t.created_at} for t in tx.tenants()
            ]

    # --- users ---------------------------------------------------------------------------------
    def create_user(self, tenant: str, name: str, roles: list[str], groups: list[str]) -> dict[str, Any]:
        """Create a user and return its API key: shown once, only its hash is stored."""
        _check_name("user", name)
        bad = [r for r in roles if r not in ROLES]
        if bad or not roles:
            raise InvalidInput(
                f"unknown role(s) {', '.join(bad) or '(none given)'}; roles: {', '.join(ROLES)}"
            )
        for g in groups:
            _check_name("group", g)
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        with self.service.write() as tx:
            if tx.tenant(tenant) is None:
                raise NotFound(
                    f"tenant {tenant} does not exist; create it with `lockstep tenants create {tenant}`"
                )
            try:
                tx.insert_user(
                    UserRow(
                        tenant,
                        name,
                        tuple(dict.fromkeys(roles)),
                        tuple(dict.fromkeys(groups)),
                        _sha(key),
                        None,
                        False,
                        iso(self.service.clock()),
                    )
                )
            except ConcurrencyError:
                raise Conflict(f"user {name} already exists in tenant {tenant}") from None
        return {"tenant": tenant, "user": name, "roles": roles, "groups": groups, "api_key": key}

    def _update(self, tenant: str, name: str, **changes: Any) -> UserRow:
        with self.service.write() as tx:
            u = tx.user(tenant, name)
            if u is None:
                raise NotFound(f"no user {name} in tenant {tenant}")
            u = replace(u, **changes)
            tx.update_user(u)
            return u

    def disable_user(self, tenant: str, name: str) -> dict[str, Any]:
        self._update(tenant, name, disabled=True)
        return {"tenant": tenant, "user": name, "disabled": True}

    def enable_user(self, tenant: str, name: str) -> dict[str, Any]:
        self._update(tenant, name, disabled=False)
        return {"tenant": tenant, "user": name, "disabled": False}

    def set_password(self, tenant: str, name: str, password: str) -> dict[str, Any]:
        if len(password) < 8:
            raise InvalidInput("a password needs at least 8 characters")
        self._update(tenant, name, password_hash=_hash_password(password))
        return {"tenant": tenant, "user": name, "password": "set"}

    def set_email(self, tenant: str, name: str, email: str) -> dict[str, Any]:
        if not re.match(r"^[^@\s]+@[^@\s]+\.[^@\s]+$", email):
            raise InvalidInput(f"{email!r} is not an e-mail address")
        self._update(tenant, name, email=email)
        return {"tenant": tenant, "user": name, "email": email}

    def rotate_key(self, tenant: str, name: str) -> dict[str, Any]:
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        self._update(tenant, name, key_hash=_sha(key))
        return {"tenant": tenant, "user": name, "api_key": key}

    def set_membership(
        self, tenant: str, name: str, *, roles: list[str] | None = None, groups: list[str] | None = None
    ) -> dict[str, Any]:
        changes: dict[str, Any] = {}
        if roles is not None:
            bad = [r for r in roles if r not in ROLES]
            if bad:
                raise InvalidInput(f"unknown role(s) {', '.join(bad)}; roles: {', '.join(ROLES)}")
            changes["roles"] = tuple(roles)
        if groups is not None:
            changes["groups"] = tuple(groups)
        u = self._update(tenant, name, **changes)
        return {"tenant": tenant, "user": name, "roles": list(u.roles), "groups": list(u.groups)}

    def users(self, tenant: str) -> list[dict[str, Any]]:
        with self.service.read() as tx:
            return [
                {
                    "user": u.name,
                    "roles": list(u.roles),
                    "groups": list(u.groups),
                    "disabled": u.disabled,
                    "password": u.password_hash is not None,
                    "created_at": u.created_at,
                }
                for u in tx.users(tenant)
            ]

    def principal(self, tenant: str, name: str) -> Principal | None:
        """The user as they are now (None if missing or disabled)."""
        with self.service.read() as tx:
            u = tx.user(tenant, name)
        if u is None or u.disabled:
            return None
        return Principal(u.tenant, u.name, u.roles, u.groups)

    # --- authentication ------------------------------------------------------------------------
    def authenticate_key(self, key: str) -> Principal | None:
        if not key.startswith(KEY_PREFIX) or len(key) > 200:
            return None
        with self.service.read() as tx:
            u = tx.user_by_key(_sha(key))
        if u is None or u.disabled:
            return None
        return Principal(u.tenant, u.name, u.roles, u.groups)

    def authenticate_password(self, tenant: str, name: str, password: str) -> Principal | None:
        with self.service.read() as tx:
            u = tx.user(tenant, name)
        ok = _check_password(password, u.password_hash if u else None)
        if not ok or u is None or u.disabled:
            return None
        return Principal(u.tenant, u.name, u.roles, u.groups)

    # --- sessions (web UI) ---------------------------------------------------------------------
    def open_session(self, p: Principal) -> tuple[str, str]:
        """Returns (cookie value, CSRF token); only the cookie's hash is stored."""
        cookie, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        now = self.service.clock()
        with self.service.write() as tx:
            tx.insert_session(
                _sha(cookie),
                p.tenant,
                p.name,
                csrf,
                int(now.timestamp() * 1000),
                int((now + SESSION_TTL).timestamp() * 1000),
            )
        return cookie, csrf

    def session(self, cookie: str) -> tuple[Principal, str] | None:
        with self.service.read() as tx:
            row = tx.session(_sha(cookie))
        if row is None or row[3] < int(self.service.clock().timestamp() * 1000):
            return None
        p = self.principal(row[0], row[1])
        return (p, row[2]) if p else None

    def close_session(self, cookie: str) -> None:
        with self.service.write() as tx:
            tx.delete_session(_sha(cookie), int(self.service.clock().timestamp() * 1000))

    def audit(
        self,
        tenant: str | None,
        actor: str | None,
        action: str,
        target: str | None,
        outcome: str,
        **detail: Any,
    ) -> None:
        with self.service.write() as tx:
            tx.audit(iso(self.service.clock()), tenant, actor, action, target, outcome, detail)
