"""A definition's migration policy (`migration: {requires_approval: ...}`): who must approve before a run
is migrated to this version. A leaf of the model (it imports nothing of it), parsed by parse_migration."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from ..canonical import JSONObject

__all__ = ["MigrationApproval"]


@dataclass(frozen=True)
class MigrationApproval:
    """`quorum` distinct approvers from `users`/`groups` approve a migration to this version, or
    `reject_quorum` rejections refuse it; undecided after `timeout`, the request expires. The vocabulary
    is the approval step's; the operator who asked may never decide (there is no allow_initiator)."""

    users: tuple[str, ...]
    groups: tuple[str, ...]
    quorum: int
    reject_quorum: int
    timeout: timedelta

    def policy(self, version: int) -> JSONObject:
        """The policy as a migration request records it (`version`: the definition version it is from)."""
        return {
            "users": list(self.users),
            "groups": list(self.groups),
            "quorum": self.quorum,
            "reject_quorum": self.reject_quorum,
            "timeout_ms": int(self.timeout.total_seconds() * 1000),
            "version": version,
        }
