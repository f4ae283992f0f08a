"""`migration: {requires_approval: {approvers, quorum, reject_quorum, timeout}}` of a definition, and the
approvers/quorum vocabulary it shares with the approval step (`parse_approvers`, used by both), so the
two say who may decide in the same words and are checked the same way at publish."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from .checks import NAME_RE, Checker
from .migration import MigrationApproval

__all__ = ["parse_approvers", "parse_migration"]


def parse_approvers(
    c: Checker, ap: str, a: Mapping[str, object]
) -> tuple[tuple[str, ...], tuple[str, ...], int, int]:
    """(users, groups, quorum, reject_quorum) of the mapping at `ap`, each problem reported at its path."""
    who = a.get("approvers")
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    if not isinstance(who, Mapping):
        c.add(f"{ap}.approvers", "required: {users: [alice, bob], groups: [finance]}")
    else:
        unknown = c.keys(f"{ap}.approvers", who, ("users", "groups"))
        users = names(c, f"{ap}.approvers.users", who.get("users"))
        groups = names(c, f"{ap}.approvers.groups", who.get("groups"))
        if not users and not groups and not unknown:
            c.add(f"{ap}.approvers", "name at least one user or group who may decide")
    quorum = a.get("quorum", 1)
    if isinstance(quorum, bool) or not isinstance(quorum, int) or quorum < 1:
        c.add(f"{ap}.quorum", "must be an integer >= 1 (distinct approvers needed)")
        quorum = 1
    elif not groups and users and quorum > len(users):
        c.add(f"{ap}.quorum", f"quorum {quorum} can never be met by the {len(users)} listed user(s)")
    rq = a.get("reject_quorum", 1)
    if isinstance(rq, bool) or not isinstance(rq, int) or rq < 1:
        c.add(f"{ap}.reject_quorum", "must be an integer >= 1 (rejections needed to reject)")
        rq = 1
    return users, groups, quorum, rq


def names(c: Checker, path: str, value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and NAME_RE.match(v) for v in value):
        c.add(path, "must be a list of names (lowercase letters, digits, -), e.g. [alice, bob]")
        return ()
    return tuple(dict.fromkeys(value))


def parse_migration(c: Checker, raw: object, max_wait: timedelta) -> MigrationApproval | None:
    """The policy of `migration:` (None when the document has none, or it has problems: reported)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        c.add("migration", "must be a mapping, e.g. migration: {requires_approval: {approvers: ..., ...}}")
        return None
    c.keys("migration", raw, ("requires_approval",))
    a = raw.get("requires_approval")
    ap = "migration.requires_approval"
    if a is None:
        if "requires_approval" not in raw:
            return None
        c.add(ap, "must be a mapping with approvers, quorum and timeout")
        return None
    if not isinstance(a, Mapping):
        c.add(ap, "must be a mapping with approvers, quorum and timeout")
        return None
    c.keys(ap, a, ("approvers", "quorum", "reject_quorum", "timeout"))
    users, groups, quorum, rq = parse_approvers(c, ap, a)
    if "timeout" not in a:
        c.add(f"{ap}.timeout", "required: how long approvers have to decide, e.g. timeout: 3d")
        timeout = timedelta(days=1)
    else:
        timeout = c.duration(f"{ap}.timeout", a["timeout"], max_wait) or timedelta(days=1)
    return MigrationApproval(users=users, groups=groups, quorum=quorum, reject_quorum=rq, timeout=timeout)
