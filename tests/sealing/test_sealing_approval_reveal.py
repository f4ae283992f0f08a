"""Approvers decide on details they can read: an approver the policy admits, holding the read_sensitive
grant, reveals a request's sealed details (audited, labels only), while an approver without the grant,
one outside the policy, and users who are not approvers are refused and see nothing; on both backends."""

from __future__ import annotations

import pytest
from sealkit import CARD, CLEAR_REF, TENANT
from sealworld import World

from lockstep.errors import Conflict, Forbidden


def _waiting(world: World) -> str:
    run_id = world.start(CARD, CLEAR_REF)
    world.wait(run_id, lambda s: s["wait_kind"] == "approval", "waited for approval")
    return run_id


def test_an_admitted_approver_with_the_grant_reveals_the_details_audited(world: World) -> None:
    """alice (named by the policy) with the grant sees the card in the details; the audit row names the
    field, never the value; the page without the reveal still shows the redaction marker."""
    run_id = _waiting(world)
    world.service.principals.set_grant(TENANT, "alice", "read_sensitive", granted=True, by="test")
    alice = world.principal("alice")
    plain = world.service.approvals.request_view(alice, run_id, "approve")
    assert CARD not in str(plain.approval), plain.approval
    shown = world.service.reveal.approval(alice, run_id, "approve", channel="ui")
    assert shown.approval is not None
    assert isinstance(shown.approval, dict)
    assert shown.approval["details"] == f"Charge card {CARD} for order {CLEAR_REF}"
    rows = world.audit("sensitive.read")
    assert [(r["actor"], r["outcome"], r["target"]) for r in rows] == [("alice", "ok", run_id)]
    assert rows[0]["detail"]["what"] == "approval"
    assert rows[0]["detail"]["step"] == "approve"
    assert rows[0]["detail"]["labels"] == ["ApprovalRequested/details"]
    assert CARD not in str(rows)


def test_an_admitted_approver_without_the_grant_is_refused_and_audited(world: World) -> None:
    """alice without the grant: 403 no_read_sensitive, a refused audit row, no value anywhere."""
    run_id = _waiting(world)
    with pytest.raises(Forbidden) as refused:
        world.service.reveal.approval(world.principal("alice"), run_id, "approve")
    assert refused.value.code == "no_read_sensitive"
    assert CARD not in str(refused.value)
    rows = world.audit("sensitive.read")
    assert [(r["actor"], r["outcome"], r["target"]) for r in rows] == [("alice", "refused", run_id)]


def test_the_grant_alone_opens_no_request_the_policy_does_not_admit(world: World) -> None:
    """The auditor (viewer, granted) and a granted approver outside the policy get the answer of a
    request that is not theirs; nothing is revealed and no reveal is recorded as allowed."""
    run_id = _waiting(world)
    world.service.principals.create_user(TENANT, "mallory", ["approver"], ["finance"])
    world.service.principals.set_grant(TENANT, "mallory", "read_sensitive", granted=True, by="test")
    for name in ("mallory", "auditor"):
        with pytest.raises((Conflict, Forbidden)) as refused:
            world.service.reveal.approval(world.principal(name), run_id, "approve")
        assert CARD not in str(refused.value)
    assert [r for r in world.audit("sensitive.read") if r["outcome"] == "ok"] == []
