"""The pure rules of migrations that need approval (core/migapproval.py): which version's policy governs,
one decision on a request (the requester never, one each, only the named, closed and expired refused),
the tally with a reject quorum, and the grant check `migrate` makes of a command's decisions."""

from __future__ import annotations

from typing import Any

import pytest

from lockstep.core.commands import Rejected
from lockstep.core.definition import parse_definition
from lockstep.core.migapproval import check_granted, decide_request, migration_policy, tally

PLAIN = {"name": "po", "steps": [{"id": "a", "wait": "1s"}]}


def guarded(**policy: Any) -> dict[str, Any]:
    rule = {"approvers": {"users": ["ana", "ben"], "groups": ["board"]}, "timeout": "1d", **policy}
    return {**PLAIN, "migration": {"requires_approval": rule}}


def request(**over: Any) -> dict[str, Any]:
    policy = migration_policy(parse_definition(PLAIN), 1, parse_definition(guarded(quorum=2)), 2)
    base = {
        "request_id": "mig_x",
        "policy": policy,
        "requested_by": "olga",
        "decisions": [],
        "status": "pending",
    }
    return {**base, "expires_at_ms": 1000, **over}


def test_the_target_governs_else_the_version_the_run_is_on() -> None:
    """Target's policy first; a plain target takes the current version's; two plain versions: none."""
    plain, strict, loose = (parse_definition(d) for d in (PLAIN, guarded(quorum=2), guarded(quorum=1)))
    first = migration_policy(plain, 1, strict, 2)
    assert first is not None
    assert (first["version"], first["quorum"], first["groups"]) == (2, 2, ["board"])
    assert migration_policy(strict, 2, loose, 3)["quorum"] == 1  # type: ignore[index]
    assert migration_policy(strict, 2, plain, 3)["version"] == 2  # type: ignore[index]
    assert migration_policy(plain, 1, plain, 3) is None


@pytest.mark.parametrize(
    ("who", "groups", "over", "code"),
    [
        ("olga", ("board",), {}, "requester"),
        ("carl", (), {}, "not_an_approver"),
        (
            "ana",
            (),
            {"decisions": [{"approver": "ana", "decision": "approve", "at": "t"}]},
            "already_decided",
        ),
        ("ana", (), {"status": "rejected"}, "not_waiting"),
        ("ana", (), {"expires_at_ms": 10}, "expired"),
        ("ana", (), {"status": "expired"}, "expired"),
    ],
)
def test_a_decision_is_refused_for_each_reason(
    who: str, groups: tuple[str, ...], over: dict[str, Any], code: str
) -> None:
    """Each refusal has its code (the service maps them to 403/409/410)."""
    with pytest.raises(Rejected) as refused:
        decide_request(request(**over), who, ("approver",), groups, "approve", None, 500, "t")
    assert refused.value.code == code


def test_a_group_member_decides_and_the_tally_follows_the_quorums() -> None:
    """Two approvals grant (quorum 2); one rejection refuses (reject_quorum 1)."""
    first, status = decide_request(request(), "cy", ("approver",), ("board",), "approve", "ok", 500, "t1")
    assert status == "pending"
    assert first["groups"] == ["board"]
    _second, status = decide_request(
        request(decisions=[first]), "ana", ("approver",), (), "approve", None, 500, "t2"
    )
    assert status == "approved"
    assert tally(request()["policy"], [{"approver": "ben", "decision": "reject"}]) == "rejected"


def test_the_grant_check_refuses_the_requesters_approval_and_a_short_quorum() -> None:
    """check_granted: the operator who asked among the deciders, or fewer eligible approvals than the
    quorum (an outsider's approval does not count), are refused; a real quorum passes."""
    policy = request()["policy"]
    ana = {"approver": "ana", "decision": "approve", "groups": []}
    olga = {"approver": "olga", "decision": "approve", "groups": ["board"]}
    zed = {"approver": "zed", "decision": "approve", "groups": []}
    cy = {"approver": "cy", "decision": "approve", "groups": ["board"]}
    with pytest.raises(Rejected) as own:
        check_granted(policy, "mig_x", [ana, olga], "olga")
    assert own.value.code == "requester"
    with pytest.raises(Rejected) as short:
        check_granted(policy, "mig_x", [ana, zed], "olga")
    assert short.value.code == "approval_required"
    check_granted(policy, "mig_x", [ana, cy], "olga")
