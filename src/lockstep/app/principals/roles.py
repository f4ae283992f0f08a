"""Who someone is (a `Principal`: tenant, user, roles, groups) and what their roles allow."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...errors import Forbidden, InvalidInput
from ...store import UserRow

__all__ = ["GRANTS", "NAME_RE", "PERMISSIONS", "ROLES", "Principal", "check_name", "principal_of"]

ROLES = ("admin", "operator", "approver", "viewer", "worker", "publisher")
# Permissions given to one user, never by a role: read_sensitive may reveal sealed values (app/reveal.py).
GRANTS = ("read_sensitive",)
NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9_.-]{0,62}[a-z0-9])?$")
# Permissions by role. `approver`, `worker` and `publisher` see no runs: they act only through their own
# endpoints.
# `schedule` (create, change, pause, resume, delete, trigger schedules) is a standing start: whoever holds
# it starts runs in the future, unattended, so it goes with `start` and `cancel`, never to a viewer.
# `secrets` (set, list, delete secrets; set the egress policy) decides what the tenant's http steps may
# reach and with which credentials: the tenant admin's alone.
PERMISSIONS: dict[str, frozenset[str]] = {
    "admin": frozenset(
        {"read", "start", "cancel", "publish", "operate", "audit", "schedule", "webhooks", "secrets"}
    ),
    "operator": frozenset({"read", "start", "cancel", "operate", "schedule"}),
    "viewer": frozenset({"read"}),
    "approver": frozenset({"approve"}),
    "worker": frozenset({"work"}),
    # A partner system's key: it sends external events (POST /v1/events) to its tenant and nothing
    # else: it sees no run, not even the ones its events reached (the answer lists their ids).
    "publisher": frozenset({"publish_events"}),
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
    grants: tuple[str, ...] = ()

    def can(self, permission: str) -> bool:
        if permission in GRANTS:
            return permission in self.grants
        return any(permission in PERMISSIONS.get(r, frozenset()) for r in self.roles)

    def require(self, permission: str) -> None:
        if not self.can(permission):
            raise Forbidden(
                f"user {self.name} (roles: {', '.join(self.roles) or 'none'}) may not {permission} "
                f"in tenant {self.tenant}"
            )


def principal_of(u: UserRow) -> Principal:
    return Principal(u.tenant, u.name, u.roles, u.groups, u.generation, u.grants)


def check_name(kind: str, name: str) -> None:
    if not NAME_RE.match(name):
        raise InvalidInput(
            f"{kind} name {name!r} is invalid: use lowercase letters, digits, '.', '_' and '-'"
        )
