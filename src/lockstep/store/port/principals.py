"""The principals aggregate: users, sessions and login counters (implemented by sqltx/principals.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ...core.throttle import LoginCounter

__all__ = ["PrincipalsTx", "UserRow"]


@dataclass(frozen=True)
class UserRow:
    tenant: str
    name: str
    roles: tuple[str, ...]
    groups: tuple[str, ...]
    key_hash: str | None
    password_hash: str | None
    disabled: bool
    created_at: str
    email: str | None = None
    # Goes up with every credential change (password, API key, disable); sessions record it.
    generation: int = 0
    # Per-user grants beyond the roles (read_sensitive: may reveal sealed values), off by default.
    grants: tuple[str, ...] = ()


class PrincipalsTx(Protocol):
    def user(self, tenant: str, name: str) -> UserRow | None: ...
    def user_by_key(self, key_hash: str) -> UserRow | None: ...
    def users(self, tenant: str) -> list[UserRow]: ...
    def tenant_users(self, tenant: str) -> list[UserRow]: ...
    def insert_user(self, u: UserRow) -> None: ...
    def update_user(self, u: UserRow) -> None: ...
    def end_sessions(self, tenant: str, name: str) -> int | None:
        """Raise the user's credential generation (ending every session opened before) and delete their
        sessions; the new generation, or None without such a user. On a backend with row locks the user
        row stays locked to the end of the transaction, so reads after it see the latest row."""
        ...

    def insert_session(
        self,
        id_hash: str,
        tenant: str,
        user: str,
        csrf: str,
        created_ms: int,
        expires_ms: int,
        generation: int,
    ) -> None: ...
    def session(self, id_hash: str) -> tuple[str, str, str, int, int] | None:
        """(tenant, user, csrf token, expires_ms, credential generation it was opened with)."""
        ...

    def delete_session(self, id_hash: str, now_ms: int) -> None: ...
    def login_counters(self, keys: Sequence[str], now_ms: int) -> dict[str, LoginCounter]:
        """Delete the counters expired by `now_ms`, then return those of `keys` (fresh ones for keys
        without one), locked to the end of the transaction where the backend has row locks: two
        transactions counting the same key run one after the other."""
        ...

    def save_login_counter(self, counter: LoginCounter, expires_ms: int) -> None:
        """Store a counter returned by login_counters in this transaction."""
        ...

    def delete_login_counter(self, key: str) -> None: ...
