"""Tenants, users, API keys, passwords and UI sessions (part of the application service layer).

Secrets are never stored: API keys (256 random bits) are kept as sha256 hashes, passwords as scrypt
hashes, session cookies as sha256 hashes. Every check re-reads the user, so disabling a user or changing
their roles takes effect on their next request. A new password, a new key or disabling the user raises
the user's credential generation, which ends every session opened before. Password logins are
throttled per user and per client address (core/throttle.py) before the scrypt check.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
import re
import secrets
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from zxcvbn import zxcvbn

from ..core.limits import DEFAULT_SERVER_LIMITS, TENANT_LIMITS, ServerLimits
from ..core.throttle import ThrottlePolicy, admit, expires_at, refund
from ..core.timeutil import iso
from ..errors import Conflict, Forbidden, InvalidInput, NotFound, RateLimited
from ..store import ConcurrencyError, UserRow
from .audit import Audit, user_change
from .kernel import Kernel
from .views import (
    EmailSet,
    KeyRotated,
    Membership,
    NewUser,
    PasswordSet,
    TenantSettings,
    TenantView,
    UserEnabled,
    UserView,
)

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
    "admin": frozenset({"read", "start", "cancel", "publish", "operate", "audit"}),
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
    # The user's credential generation when these credentials were checked: a session opened for this
    # principal records it, so a change committed after the check still ends that session.
    credential_generation: int = 0

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


def _principal(u: UserRow) -> Principal:
    return Principal(u.tenant, u.name, u.roles, u.groups, u.generation)


# zxcvbn refuses longer input (its matching is superlinear); what follows 72 characters only adds strength.
_ZXCVBN_MAX = 72


def check_password_policy(
    password: str, *, tenant: str, user: str, limits: ServerLimits = DEFAULT_SERVER_LIMITS
) -> None:
    """Refuse a short password or one that lists of common passwords, words, names and keyboard patterns
    make easy to guess (zxcvbn, offline), saying why and how to pick a better one."""
    shortest = limits["min_password_chars"]
    how = (
        "pick a passphrase of four or more unrelated words, or let a password manager generate one "
        f"(at least {shortest} characters)"
    )
    if len(password) < shortest:
        raise InvalidInput(
            f"the password is too short ({len(password)} characters, at least {shortest} needed): {how}"
        )
    verdict = zxcvbn(password[:_ZXCVBN_MAX], user_inputs=[tenant, user])
    if verdict["score"] < limits["min_password_score"]:
        warning = str(verdict["feedback"].get("warning") or "It is easy to guess.").rstrip(".")
        raise InvalidInput(
            f"the password is too easy to guess ({warning.lower()}; common passwords, words, names, "
            f"dates, repeats and keyboard patterns are tried first): {how}"
        )


def _address_key(address: str) -> str:
    """One counter per IPv4 address and per IPv6 /64 (one end user usually holds a whole /64)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return "address:" + address[:100]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return f"address:{ip.ipv4_mapped}"
        return f"address:{ipaddress.IPv6Network((ip, 64), strict=False)}"
    return f"address:{ip}"


def _check_name(kind: str, name: str) -> None:
    if not NAME_RE.match(name):
        raise InvalidInput(
            f"{kind} name {name!r} is invalid: use lowercase letters, digits, '.', '_' and '-'"
        )


class Principals:
    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        # Changes of tenants and users are audited; no user is logged in (CLI, Python API): no actor.
        self.log = Audit(kernel)
        values = kernel.server_limits  # the login throttle's limits, as the server is configured

        def policy(attempts: str) -> ThrottlePolicy:
            return ThrottlePolicy(
                values[attempts],
                values["login_window_seconds"] * 1000,
                values["login_lockout_seconds"] * 1000,
                values["login_lockout_max_seconds"] * 1000,
            )

        self._user_policy = policy("login_attempts_per_user")
        self._address_policy = policy("login_attempts_per_address")

    # --- tenants -------------------------------------------------------------------------------
    def create_tenant(self, name: str) -> TenantSettings:
        _check_name("tenant", name)
        try:
            with self.kernel.write() as tx:
                tx.insert_tenant(name, {}, iso(self.kernel.clock()))
                self.log.record(name, None, "tenant.create", name, "ok", tx=tx)
        except ConcurrencyError:
            raise Conflict(f"tenant {name} already exists") from None
        return TenantSettings(tenant=name, settings={})

    def set_tenant(self, name: str, **changes: Any) -> TenantSettings:
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
            row = tx.tenant(name)
            if row is None:
                raise NotFound(
                    f"tenant {name} does not exist; create it with `lockstep tenants create {name}`"
                )
            settings = {**row.settings, **changes}
            settings = {k: v for k, v in settings.items() if v is not None}
            tx.update_tenant_settings(name, settings)
            self.log.record(name, None, "tenant.settings", name, "ok", tx=tx, changed=sorted(changes))
        return TenantSettings(tenant=name, settings=settings)

    def tenants(self) -> list[TenantView]:
        with self.kernel.read() as tx:
            rows = tx.tenants()
        return [TenantView(tenant=t.name, settings=t.settings, created_at=t.created_at) for t in rows]

    # --- users ---------------------------------------------------------------------------------
    def create_user(self, tenant: str, name: str, roles: list[str], groups: list[str]) -> NewUser:
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
        with self.kernel.write() as tx:
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
                        iso(self.kernel.clock()),
                    )
                )
            except ConcurrencyError:
                raise Conflict(f"user {name} already exists in tenant {tenant}") from None
            kept = {"roles": list(dict.fromkeys(roles)), "groups": list(dict.fromkeys(groups))}
            self.log.record(tenant, None, "user.create", name, "ok", tx=tx, **kept)
        return NewUser(tenant=tenant, user=name, roles=roles, groups=groups, api_key=key)

    def _update(self, tenant: str, name: str, *, end_sessions: bool = False, **changes: Any) -> UserRow:
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
            action, detail = user_change(changes)
            self.log.record(tenant, None, action, name, "ok", tx=tx, **detail)
            return u

    def disable_user(self, tenant: str, name: str) -> UserEnabled:
        self._update(tenant, name, end_sessions=True, disabled=True)
        return UserEnabled(tenant=tenant, user=name, disabled=True)

    def enable_user(self, tenant: str, name: str) -> UserEnabled:
        self._update(tenant, name, disabled=False)
        return UserEnabled(tenant=tenant, user=name, disabled=False)

    def set_password(self, tenant: str, name: str, password: str) -> PasswordSet:
        check_password_policy(password, tenant=tenant, user=name, limits=self.kernel.server_limits)
        self._update(tenant, name, end_sessions=True, password_hash=_hash_password(password))
        return PasswordSet(tenant=tenant, user=name, password="set", sessions="ended")  # noqa: S106 - not one

    def set_email(self, tenant: str, name: str, email: str) -> EmailSet:
        if not re.match(r"^[^@\s]+@[^@\s]+\.[^@\s]+$", email):
            raise InvalidInput(f"{email!r} is not an e-mail address")
        self._update(tenant, name, email=email)
        return EmailSet(tenant=tenant, user=name, email=email)

    def rotate_key(self, tenant: str, name: str) -> KeyRotated:
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        self._update(tenant, name, end_sessions=True, key_hash=_sha(key))
        return KeyRotated(tenant=tenant, user=name, api_key=key, sessions="ended")

    def set_membership(
        self, tenant: str, name: str, *, roles: list[str] | None = None, groups: list[str] | None = None
    ) -> Membership:
        changes: dict[str, Any] = {}
        if roles is not None:
            bad = [r for r in roles if r not in ROLES]
            if bad:
                raise InvalidInput(f"unknown role(s) {', '.join(bad)}; roles: {', '.join(ROLES)}")
            changes["roles"] = tuple(roles)
        if groups is not None:
            changes["groups"] = tuple(groups)
        u = self._update(tenant, name, **changes)
        return Membership(tenant=tenant, user=name, roles=list(u.roles), groups=list(u.groups))

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
            )
            for u in rows
        ]

    def principal(self, tenant: str, name: str) -> Principal | None:
        """The user as they are now (None if missing or disabled)."""
        with self.kernel.read() as tx:
            u = tx.user(tenant, name)
        if u is None or u.disabled:
            return None
        return _principal(u)

    # --- authentication ------------------------------------------------------------------------
    def authenticate_key(self, key: str) -> Principal | None:
        if not key.startswith(KEY_PREFIX) or len(key) > 200:
            return None
        with self.kernel.read() as tx:
            u = tx.user_by_key(_sha(key))
        if u is None or u.disabled:
            return None
        return _principal(u)

    def authenticate_password(
        self, tenant: str, name: str, password: str, *, address: str | None = None
    ) -> Principal | None:
        """The user if the password is theirs, else None. Raises RateLimited, before any password check,
        when the user or the client `address` is locked out (see core/throttle.py)."""
        valid = bool(NAME_RE.match(tenant) and NAME_RE.match(name))
        user_key = f"user:{tenant}/{name}"
        policies = {user_key: self._user_policy} if valid else {}
        if address is not None:
            policies[_address_key(address)] = self._address_policy
        self._admit(tenant, name, address, policies)
        if not valid:
            return None  # no such user can exist: nothing to hash
        with self.kernel.read() as tx:
            u = tx.user(tenant, name)
        ok = _check_password(password, u.password_hash if u else None)
        if not ok or u is None or u.disabled:
            return None  # the attempt stays counted
        now = self._now_ms()
        with self.kernel.write() as tx:
            tx.delete_login_counter(user_key)
            for key, counter in tx.login_counters(list(policies.keys() - {user_key}), now).items():
                kept = refund(counter, now, policies[key])
                tx.save_login_counter(kept, expires_at(kept, policies[key]))
        return _principal(u)

    def _admit(
        self, tenant: str, name: str, address: str | None, policies: dict[str, ThrottlePolicy]
    ) -> None:
        """Count this attempt against every counter, or refuse it (audited) if one is locked."""
        now = self._now_ms()
        with self.kernel.write() as tx:
            counters = tx.login_counters(list(policies), now)
            admitted = {key: admit(counters[key], now, policies[key]) for key in policies}
            locked = {key: wait for key, (_c, wait) in admitted.items() if wait > 0}
            if not locked:
                for key, (counter, _wait) in admitted.items():
                    tx.save_login_counter(counter, expires_at(counter, policies[key]))
                return
            wait_s = math.ceil(max(locked.values()) / 1000)
            tx.audit(
                iso(self.kernel.clock()),
                tenant[:100] or None,
                name[:100] or None,
                "ui.login",
                None,
                "throttled",
                {"address": address, "locked": sorted(locked), "retry_after_s": wait_s},
            )
        wait_text = f"{wait_s} seconds" if wait_s < 120 else f"{math.ceil(wait_s / 60)} minutes"
        raise RateLimited(
            f"logins are paused after too many failed attempts for this user or from this address; "
            f"try again in {wait_text}, or log in with an API key",
            retry_after=wait_s,
            code="login_throttled",
        )

    def _now_ms(self) -> int:
        return int(self.kernel.clock().timestamp() * 1000)

    # --- sessions (web UI) ---------------------------------------------------------------------
    def open_session(self, p: Principal) -> tuple[str, str]:
        """Returns (cookie value, CSRF token); only the cookie's hash is stored."""
        cookie, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        now = self.kernel.clock()
        with self.kernel.write() as tx:
            tx.insert_session(
                _sha(cookie),
                p.tenant,
                p.name,
                csrf,
                int(now.timestamp() * 1000),
                int((now + SESSION_TTL).timestamp() * 1000),
                p.credential_generation,
            )
        return cookie, csrf

    def session(self, cookie: str) -> tuple[Principal, str] | None:
        """The session's user as they are now, and its CSRF token; None once it expired, the user was
        disabled or their credentials changed after the login that opened it."""
        with self.kernel.read() as tx:
            row = tx.session(_sha(cookie))
            u = tx.user(row[0], row[1]) if row is not None else None
        if row is None or u is None or row[3] < self._now_ms():
            return None
        if u.disabled or u.generation != row[4]:
            return None
        return _principal(u), row[2]

    def close_session(self, cookie: str) -> None:
        with self.kernel.write() as tx:
            tx.delete_session(_sha(cookie), int(self.kernel.clock().timestamp() * 1000))

    def audit(
        self,
        tenant: str | None,
        actor: str | None,
        action: str,
        target: str | None,
        outcome: str,
        **detail: Any,
    ) -> None:
        """One audit row in its own transaction: Audit.record (app/audit.py), kept for its callers."""
        self.log.record(tenant, actor, action, target, outcome, **detail)
