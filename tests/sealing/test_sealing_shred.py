"""Crypto-shredding on both backends: forgetting a finished run or shredding a tenant destroys the keys,
after which the sensitive values are unreadable (views say "forgotten", a reveal too), while the history,
the hash chain, every clear field and verify stay as they were. Unfinished runs are protected."""

from __future__ import annotations

import pytest
from sealkit import CARD, CLEAR_REF, TENANT
from sealworld import World

from lockstep.core.sealed import FORGOTTEN, redaction
from lockstep.errors import InvalidInput, Refused

GONE = redaction(FORGOTTEN)


def _history(world: World, run_id: str) -> list[tuple[int, str]]:
    with world.service.read() as tx:
        return [(e.seq, h) for e, h in tx.events(run_id)]


def test_forgetting_a_run_makes_its_values_unreadable_and_keeps_verify_green(world: World) -> None:
    """After `runs forget`, the run's view and its reveal show "forgotten" where values were; the history
    is byte for byte the same, verify passes, another run still reveals, and the act is audited."""
    run_id = world.through(CARD, CLEAR_REF)
    other = world.through(CARD, "REF-OTHER")
    before = _history(world, run_id)
    world.service.keys.forget(TENANT, run_id, "customer asked to be forgotten", "admin")
    shown = world.engine.show(run_id, tenant=TENANT)
    assert shown["input"] == {"card": GONE, "ref": CLEAR_REF}  # what was clear stays clear
    assert GONE == {"$redacted": "forgotten", "readable_by": None}  # nobody may read it now
    assert shown["steps"]["charge"]["output"]["token"] == GONE
    revealed = world.service.reveal.run(world.principal("auditor"), run_id, channel="test")
    assert revealed.input["card"] == GONE
    events = world.service.reveal.events(world.principal("auditor"), run_id, channel="test")
    assert next(e.data["details"] for e in events if e.type == "ApprovalRequested") == GONE
    assert _history(world, run_id) == before
    assert [v.ok for v in world.service.verify(run_id)] == [True]
    assert world.service.reveal.run(world.principal("auditor"), other, channel="test").input["card"] == CARD
    (row,) = world.audit("keys.forget")
    assert row["target"] == run_id
    assert row["detail"] == {"reason": "customer asked to be forgotten"}
    with world.service.read() as tx:
        assert tx.run_key(run_id).wrapped is None  # the key itself is gone from the database


def test_forgetting_needs_a_finished_run_and_a_reason(world: World) -> None:
    """An unfinished run cannot be forgotten (it still needs its values); a reason is required."""
    assert world.worker is not None
    world.worker.stop()
    world.worker = None
    run_id = world.start(CARD, CLEAR_REF)
    with pytest.raises(Refused, match="only a finished run can be forgotten") as e:
        world.service.keys.forget(TENANT, run_id, "why not", "admin")
    assert e.value.code == "not_finished"
    with pytest.raises(InvalidInput, match="reason is required"):
        world.service.keys.forget(TENANT, run_id, " ", "admin")
    assert world.service.reveal.run(world.principal("auditor"), run_id, channel="test").input["card"] == CARD


def test_shredding_a_tenant_refuses_while_runs_are_unfinished_then_destroys_every_key(world: World) -> None:
    """Shredding names the unfinished runs and changes nothing; with --cancel they are cancelled first.
    Afterwards no value of the tenant opens, verify passes, and new runs get a new key."""
    done = world.through(CARD, CLEAR_REF)
    assert world.worker is not None
    world.worker.stop()
    world.worker = None
    live = world.start(CARD, "REF-LIVE")
    with pytest.raises(Refused, match=f"1 unfinished run\\(s\\): {live}") as e:
        world.service.keys.shred(TENANT, "tenant closed", "admin")
    assert e.value.code == "unfinished_runs"
    assert world.service.reveal.run(world.principal("auditor"), done, channel="test").input["card"] == CARD
    out = world.service.keys.shred(TENANT, "tenant closed", "admin", cancel=True)
    assert out.cancelled == [live]
    assert out.key_versions == 1
    assert out.run_keys == 2
    for run_id in (done, live):
        assert world.engine.show(run_id, tenant=TENANT)["input"]["card"] == GONE
        assert (
            world.service.reveal.run(world.principal("auditor"), run_id, channel="test").input["card"] == GONE
        )
    assert world.engine.show(live, tenant=TENANT)["status"] == "cancelled"
    assert all(v.ok for v in world.service.verify(tenant=TENANT))
    (row,) = world.audit("tenant.shred")
    assert row["detail"]["run_keys"] == 2
    assert world.service.keys.status(TENANT).tenants[0].versions == []
    fresh = world.start("4111-AFTER-0001", "REF-AFTER")
    assert world.service.reveal.run(world.principal("auditor"), fresh, channel="test").input["card"] == (
        "4111-AFTER-0001"
    )


def test_purging_a_sealed_run_deletes_its_key_with_its_rows(world: World) -> None:
    """A purged run's data key goes with its events (retention's RUN_ROWS): no key of a purged run is
    left to open a copy of its values, and the other runs keep theirs."""
    run_id = world.through(CARD, CLEAR_REF)
    other = world.through(CARD, "REF-OTHER")
    with world.service.read() as tx:
        assert tx.run_key(run_id) is not None
    world.service.retention.purge_run(TENANT, run_id, "erasure request", "admin")
    with world.service.read() as tx:
        assert tx.run_key(run_id) is None
        assert tx.run_key(other) is not None
        assert tx.tombstone(run_id) is not None
    assert world.service.reveal.run(world.principal("auditor"), other, channel="test").input["card"] == CARD
