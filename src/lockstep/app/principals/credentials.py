"""Credentials: API keys, passwords and UI sessions, and the throttled password login.

Secrets are never stored: API keys (256 random bits) are kept as sha256 hashes, passwords as scrypt
hashes, session cookies as sha256 hashes. Every check re-reads the user, so disabling a user or changing
their roles takes effect on their next request. A new password, a new key or disabling the user raises
the user's credential generation, which ends every session opened before (app/principals/accounts.py).
Password logins are throttled per user and per client address (core/throttle.py) before the scrypt check.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
import secrets
from datetime import timedelta

from zxcvbn import zxcvbn

from ...core.limits import DEFAULT_SERVER_LIMITS, ServerLimits
from ...core.throttle import ThrottlePolicy, admit, expires_at, refund
from ...core.timeutil import iso
from ...errors import InvalidInput, RateLimited
from ...store import AuthTx
from ..port import KernelPort
from .roles import NAME_RE, Principal, principal_of

__all__ = [
    "KEY_PREFIX",
    "SESSION_TTL",
    "Credentials",
    "check_password_policy",
    "hash_password",
    "new_api_key",
    "sha256_hex",
]

KEY_PREFIX = "lsk_"
SESSION_TTL = timedelta(hours=12)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def hash_password(password: str, salt: bytes | None = None) -> str:
    salt = salt or secrets.token_bytes(16)
    dk = hashlib.scrypt(password.encode(), salt=salt, n=2**14, r=8, p=1, dklen=32)
    return f"scrypt$16384$8$1${salt.hex()}${dk.hex()}"


def _check_password(password: str, stored: str | None) -> bool:
    if not stored:
        hash_password(password, b"\0" * 16)  # same work either way: no timing hint that the user exists
        return False
    _alg, n, r, p, salt, dk = stored.split("$")
    got = hashlib.scrypt(password.encode(), salt=bytes.fromhex(salt), n=int(n), r=int(r), p=int(p), dklen=32)
    return hmac.compare_digest(got.hex(), dk)


def new_api_key() -> str:
    """A fresh API key (shown once; only sha256_hex of it is stored)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


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


class Credentials:
    """Authentication by API key or password (throttled), and the UI's sessions."""

    def __init__(self, kernel: KernelPort[AuthTx]) -> None:
        self.kernel = kernel
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

    # --- authentication ------------------------------------------------------------------------
    def authenticate_key(self, key: str) -> Principal | None:
        if not key.startswith(KEY_PREFIX) or len(key) > 200:
            return None
        with self.kernel.read() as tx:
            u = tx.user_by_key(sha256_hex(key))
        if u is None or u.disabled:
            return None
        return principal_of(u)

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
        return principal_of(u)

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
                sha256_hex(cookie),
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
            row = tx.session(sha256_hex(cookie))
            u = tx.user(row[0], row[1]) if row is not None else None
        if row is None or u is None or row[3] < self._now_ms():
            return None
        if u.disabled or u.generation != row[4]:
            return None
        return principal_of(u), row[2]

    def close_session(self, cookie: str) -> None:
        with self.kernel.write() as tx:
            tx.delete_session(sha256_hex(cookie), int(self.kernel.clock().timestamp() * 1000))
