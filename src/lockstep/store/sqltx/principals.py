"""PrincipalsTx in SQL: users (roles, groups, credential hashes), browser sessions, and the counters
that throttle login attempts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ...core.throttle import LoginCounter
from ..port import ConcurrencyError, UserRow
from .base import SqlBase

__all__ = ["SqlPrincipalsTx"]


class SqlPrincipalsTx(SqlBase):
    def _user(self, r: Any) -> UserRow:
        return UserRow(
            r[0],
            r[1],
            tuple(json.loads(r[2])),
            tuple(json.loads(r[3])),
            r[4],
            r[5],
            bool(r[6]),
            r[7],
            r[8],
            int(r[9]),
            tuple(json.loads(r[10] or "[]")),
        )

    def user(self, tenant: str, name: str) -> UserRow | None:
        r = self._one("user_get", tenant=tenant, name=name)
        return self._user(r) if r else None

    def user_by_key(self, key_hash: str) -> UserRow | None:
        r = self._one("user_by_key", key_hash=key_hash)
        return self._user(r) if r else None

    def users(self, tenant: str) -> list[UserRow]:
        return [self._user(r) for r in self.c.execute(self.q["users_list"], {"tenant": tenant})]

    def tenant_users(self, tenant: str) -> list[UserRow]:
        return [self._user(r) for r in self.c.execute(self.q["users_in_groups"], {"tenant": tenant})]

    def insert_user(self, u: UserRow) -> None:
        try:
            self.c.execute(
                self.q["user_insert"],
                {
                    "tenant": u.tenant,
                    "name": u.name,
                    "roles": json.dumps(list(u.roles)),
                    "groups": json.dumps(list(u.groups)),
                    "key_hash": u.key_hash,
                    "created_at": u.created_at,
                },
            )
        except self.integrity_error:
            raise ConcurrencyError(f"user {u.name} already exists in tenant {u.tenant}") from None

    def update_user(self, u: UserRow) -> None:
        self.c.execute(
            self.q["user_update"],
            {
                "tenant": u.tenant,
                "name": u.name,
                "roles": json.dumps(list(u.roles)),
                "groups": json.dumps(list(u.groups)),
                "key_hash": u.key_hash,
                "password_hash": u.password_hash,
                "disabled": int(u.disabled),
                "email": u.email,
                "grants": json.dumps(list(u.grants)),
            },
        )

    # --- sessions ------------------------------------------------------------------------------
    def end_sessions(self, tenant: str, name: str) -> int | None:
        # The increment is one statement: two changes racing each other both raise the generation.
        r = self._one("user_end_sessions", tenant=tenant, name=name)
        if r is None:
            return None
        self.c.execute(self.q["sessions_of_user_delete"], {"tenant": tenant, "name": name})
        return int(r[0])

    def insert_session(
        self,
        id_hash: str,
        tenant: str,
        user: str,
        csrf: str,
        created_ms: int,
        expires_ms: int,
        generation: int,
    ) -> None:
        self.c.execute(
            self.q["session_insert"],
            {
                "id_hash": id_hash,
                "tenant": tenant,
                "user": user,
                "csrf": csrf,
                "created_at": created_ms,
                "expires_at": expires_ms,
                "generation": generation,
            },
        )

    def session(self, id_hash: str) -> tuple[str, str, str, int, int] | None:
        r = self._one("session_get", id_hash=id_hash)
        return (r[0], r[1], r[2], r[3], int(r[4])) if r else None

    def delete_session(self, id_hash: str, now_ms: int) -> None:
        self.c.execute(self.q["session_delete"], {"id_hash": id_hash, "now": now_ms})

    # --- login throttling ----------------------------------------------------------------------
    def login_counters(self, keys: Sequence[str], now_ms: int) -> dict[str, LoginCounter]:
        self.c.execute(self.q["login_counters_prune"], {"now": now_ms})
        out = {}
        for key in sorted(set(keys)):  # one order for every transaction: no deadlock between two
            self.c.execute(self.q["login_counter_ensure"], {"key": key, "now": now_ms})
            r = self._one("login_counter_get", key=key)
            out[key] = LoginCounter(
                r[0], int(r[1]), int(r[2]), None if r[3] is None else int(r[3]), int(r[4])
            )
        return out

    def save_login_counter(self, counter: LoginCounter, expires_ms: int) -> None:
        self.c.execute(
            self.q["login_counter_save"],
            {
                "key": counter.key,
                "attempts": counter.attempts,
                "window_start": counter.window_start_ms,
                "locked_until": counter.locked_until_ms,
                "lockouts": counter.lockouts,
                "expires_at": expires_ms,
            },
        )

    def delete_login_counter(self, key: str) -> None:
        self.c.execute(self.q["login_counter_delete"], {"key": key})
