"""A schedule's input is sealed at rest like a run's, on both backends: the card of a PAY schedule is in
no stored byte in clear (schedule row, slot records, its runs), its views redact it, the activity of a
run it starts gets it in clear; a schedule that follows the latest version seals what a newer version
declares sensitive at its next start; deleting it destroys its key; without a key it is refused."""

from __future__ import annotations

import copy
import json
from contextlib import ExitStack
from pathlib import Path

import pytest
from sealkit import CARD, CLEAR_REF, PLAIN, SEEN, TENANT, assert_sealed_at_rest, checkpoint, stored_bytes
from sealworld import World, open_world

from lockstep.errors import Refused


def _scan(world: World, where: str) -> None:
    if world.url.startswith("sqlite:"):
        checkpoint(world.url)
    assert_sealed_at_rest(stored_bytes(world.url), where)


def test_a_schedule_input_is_sealed_and_its_runs_get_it_in_clear(world: World) -> None:
    """Created, shown and triggered: the card is stored only sealed, shown redacted, given in clear."""
    schedules = world.service.schedules
    view = schedules.create(
        TENANT, "nightly-pay", definition="pay", cron="0 2 * * *", timezone="Europe/Berlin",
        input={"card": CARD, "ref": CLEAR_REF}, actor="admin",
    )  # fmt: skip
    assert view.input == {
        "card": {"$redacted": "sensitive", "readable_by": "read_sensitive"},
        "ref": CLEAR_REF,
    }
    _scan(world, "after create")
    shown = world.get("/v1/schedules/nightly-pay", "viewer").json()
    assert shown["input"]["card"] == {"$redacted": "sensitive", "readable_by": "read_sensitive"}
    SEEN.clear()
    run_id = schedules.trigger(TENANT, "nightly-pay", key="now", actor="admin").run_id
    world.wait(run_id, lambda s: s["wait_kind"] == "approval", "charged")
    assert {"card": CARD, "ref": CLEAR_REF} in SEEN
    assert world.engine.show(run_id, tenant=TENANT)["input"]["card"]["$redacted"] == "sensitive"
    _scan(world, "after a run of it")
    row = world.audit("schedule.create")[0]
    assert CARD not in json.dumps(row)


def test_a_newer_version_that_declares_more_is_sealed_at_the_next_start(world: World) -> None:
    """A schedule of `plain` (nothing sensitive) following the latest version: once version 2 declares
    the card sensitive, the next start seals the schedule's stored input too."""
    schedules = world.service.schedules
    schedules.create(
        TENANT, "p", definition="plain", cron="0 2 * * *", input={"card": CARD, "ref": CLEAR_REF}
    )
    with world.service.read() as tx:
        assert tx.schedule(TENANT, "p").input["card"] == CARD  # type: ignore[union-attr]
    v2 = copy.deepcopy(PLAIN)
    v2["input_schema"] = {
        "type": "object",
        "properties": {"card": {"type": "string", "x-lockstep-sensitive": True}, "ref": {"type": "string"}},
    }
    world.engine.publish(v2, tenant=TENANT)
    schedules.trigger(TENANT, "p", key="one")
    with world.service.read() as tx:
        stored = tx.schedule(TENANT, "p").input  # type: ignore[union-attr]
    assert "$sealed" in stored["card"]
    assert stored["ref"] == CLEAR_REF


def test_deleting_a_schedule_destroys_its_key(world: World) -> None:
    schedules = world.service.schedules
    schedules.create(TENANT, "gone", definition="pay", cron="0 2 * * *", input={"card": CARD, "ref": "r"})
    sid = world.service.store.write
    with world.service.read() as tx:
        row = tx.schedule(TENANT, "gone")
        assert row is not None
        assert tx.run_key(f"schedule:{row.id}").wrapped is not None  # type: ignore[union-attr]
    schedules.delete(TENANT, "gone", actor="admin")
    with world.service.read() as tx:
        key = tx.run_key(f"schedule:{row.id}")
    assert key is not None
    assert key.wrapped is None
    assert key.forgotten_at
    assert sid


def test_without_a_key_a_sensitive_schedule_is_refused(
    backend: str, tmp_path: Path, key_file: Path, request: pytest.FixtureRequest
) -> None:
    """A process without the encryption key cannot store a sensitive input: refused, nothing written."""
    sqlite = f"sqlite:///{tmp_path}/lockstep.db"
    url = sqlite if backend == "sqlite" else str(request.getfixturevalue("pg_url"))
    with ExitStack() as stack:
        w = open_world(url, key_file, stack, keys=False)
        try:
            with pytest.raises(Refused, match="needs the encryption key"):
                w.service.schedules.create(
                    TENANT, "x", definition="pay", cron="0 2 * * *", input={"card": CARD, "ref": "r"}
                )
            assert w.service.schedules.list(TENANT) == []
        finally:
            w.engine.close()
