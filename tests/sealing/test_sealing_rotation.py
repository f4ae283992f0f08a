"""Key rotation on both backends: a new version of the tenant's key for new run keys, the background
re-wrap moves every run key to it while runs go on, and the old version is deleted once unused. Events
and snapshots never change; every run finishes with its own, correct values."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sealkit import TENANT
from sealworld import World

from lockstep.errors import Refused


def _status(world: World) -> dict[str, object]:
    (t,) = world.service.keys.status(TENANT).tenants
    return {"versions": [v.version for v in t.versions], "pending": t.rewrap_pending, "tenant": t}


def _stored_history(world: World) -> dict[str, list[tuple[int, str]]]:
    with world.service.read() as tx:
        return {rid: [(e.seq, h) for e, h in tx.events(rid)] for rid in tx.run_ids(TENANT)}


def test_rotation_while_runs_proceed_loses_nothing(world: World) -> None:
    """Two rotations while 40 runs are started and finish: all complete with their own token, every
    run key ends on the newest version, the older versions are gone, and verify passes."""
    cards = {}
    for i in range(40):
        if i in (12, 26):
            world.service.keys.rotate(TENANT, "test")
        card = f"4111-ROT-{i:04d}"
        cards[world.engine.start("pay-auto", input={"card": card, "ref": f"r{i}"}, tenant=TENANT)] = card
    for run_id in cards:
        world.wait(run_id, lambda s: s["status"] == "completed", "completed")
    deadline = time.monotonic() + 30
    while (status := _status(world)) != {"versions": [3], "pending": 0, "tenant": status["tenant"]}:
        assert time.monotonic() < deadline, f"the re-wrap did not finish: {status}"
        time.sleep(0.1)
    auditor = world.principal("auditor")
    for run_id, card in cards.items():
        shown = world.service.reveal.run(auditor, run_id, channel="test")
        assert shown.output == {"token": f"TOK-{card}", "ref": shown.input["ref"]}
        assert shown.input["card"] == card
    counts = status["tenant"].versions[0].run_keys  # type: ignore[attr-defined]
    assert counts == len(cards)
    assert all(v.ok for v in world.service.verify(tenant=TENANT))
    actions = [r["action"] for r in world.audit("keys.rotate")] + [
        r["action"] for r in world.audit("keys.retire")
    ]
    assert actions == ["keys.rotate", "keys.rotate", "keys.retire", "keys.retire"]
    assert world.audit("keys.rewrap")


def test_rewrap_is_resumable_and_changes_only_key_rows(
    world: World, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Re-wrap in small batches, stopped after the first and resumed by another engine: every run stays
    readable throughout, no event or snapshot changes, and the old version goes only at the end."""
    assert world.worker is not None
    world.worker.stop()
    world.worker = None
    runs = [world.start(f"4111-RES-{i}", f"r{i}") for i in range(7)]
    before = _stored_history(world)
    world.service.keys.rotate(TENANT, "test")
    assert world.service.keys.rewrap(limit=3) == 3
    assert _status(world)["pending"] == 4
    world.engine.close()  # interrupted: the next process goes on where this one stopped
    from lockstep.engine import Engine

    with Engine.open(world.url, keys=world.key_file) as again:
        auditor = again.service.principals.principal(TENANT, "auditor")
        moved = []
        while n := again.service.keys.rewrap(limit=3):
            moved.append(n)
            for i, run_id in enumerate(runs):  # readable between any two batches
                assert (
                    again.service.reveal.run(auditor, run_id, channel="test").input["card"] == f"4111-RES-{i}"
                )
        assert moved == [3, 1]
        (t,) = again.service.keys.status(TENANT).tenants
        assert [v.version for v in t.versions] == [2]
        with again.service.read() as tx:
            after = {rid: [(e.seq, h) for e, h in tx.events(rid)] for rid in tx.run_ids(TENANT)}
        assert after == before
        assert all(v["ok"] for v in again.verify())


def test_rotation_needs_the_key_and_refuses_a_foreign_one(world: World, tmp_path: Path) -> None:
    """Without a key, rotation is refused (and names the setting); with another key than the one that
    wrapped the tenant's, it is refused too, and nothing changes."""
    world.start("4111-FOREIGN-1", "r1")
    from lockstep.app.keys import create_key_file
    from lockstep.engine import Engine

    with Engine.open(world.url) as keyless, pytest.raises(Refused, match="LOCKSTEP_KEY_FILE"):
        keyless.service.keys.rotate(TENANT, "test")
    other = tmp_path / "other.key"
    create_key_file(other)
    with (
        Engine.open(world.url, keys=other) as foreign,
        pytest.raises(Refused, match="wrapped by local:") as e,
    ):
        foreign.service.keys.rotate(TENANT, "test")
    assert e.value.code == "wrong_key"
    assert _status(world)["versions"] == [1]
