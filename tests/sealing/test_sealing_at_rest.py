"""Sensitive values at rest, on both backends: after runs that used them (run input, activity input and
output, approval details, an activity's error message), neither the database files nor `pg_dump` nor
the logs hold any of them in clear; a sealed value moved to another run does not open; `verify` needs
no key; a run input cannot forge a sealed value."""

from __future__ import annotations

import json
import logging

import pytest
from sealkit import (
    CARD,
    CLEAR_REF,
    SECRETS,
    SEEN,
    TENANT,
    TOKEN,
    assert_sealed_at_rest,
    checkpoint,
    stored_bytes,
)
from sealworld import World

from lockstep.app.observability import configure_logging, log_events
from lockstep.errors import InvalidInput, Refused


def test_no_sensitive_value_is_stored_or_logged_in_clear(
    world: World, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Runs through every kind of sensitive field: the activities got them in clear, a reveal shows them,
    and no stored byte (database and WAL, or pg_dump) and no log line holds one."""
    configure_logging("DEBUG")
    world.service.listeners.append(log_events)
    caplog.set_level(logging.DEBUG)
    SEEN.clear()
    runs = [world.through(CARD, CLEAR_REF) for _ in range(3)]
    # The activities got their inputs in clear (the charge the card, the receipt the token).
    assert {"card": CARD, "ref": CLEAR_REF} in SEEN
    assert {"token": TOKEN, "ref": CLEAR_REF} in SEEN
    # They were really there: revealed to the auditor, the values come back exactly.
    shown = world.service.reveal.run(world.principal("auditor"), runs[0], channel="test")
    assert shown.input == {"card": CARD, "ref": CLEAR_REF}
    assert shown.steps["charge"].output == {"token": TOKEN, "ref": CLEAR_REF}
    assert "NUMBAT" in json.dumps(shown.error)
    events = world.service.reveal.events(world.principal("auditor"), runs[0], channel="test")
    details = next(e.data["details"] for e in events if e.type == "ApprovalRequested")
    assert CARD in details
    assert_sealed_at_rest(stored_bytes(world.url), f"{world.url} while the engine runs")
    world.worker.stop() if world.worker else None
    world.worker = None
    logs = capsys.readouterr().err + caplog.text
    assert CLEAR_REF in logs or "RunStarted" in logs, "the logs were not captured"
    assert not [s for s in SECRETS if s in logs], "a sensitive value was logged"
    if world.url.startswith("sqlite:"):
        checkpoint(world.url)
        assert_sealed_at_rest(stored_bytes(world.url), "the database file after a checkpoint")
    assert all(v.ok for v in world.service.verify(tenant=TENANT))


def test_a_plain_definition_stores_its_values_in_clear_and_creates_no_key(world: World) -> None:
    """A definition without sensitive fields is not sealed at all: no run key, its value in clear."""
    run_id = world.engine.start("plain", input={"card": "CLEAR-CARD-1"}, tenant=TENANT)
    world.wait(run_id, lambda s: s["status"] == "completed", "completed")
    assert world.engine.show(run_id, tenant=TENANT)["input"] == {"card": "CLEAR-CARD-1"}
    with world.service.read() as tx:
        assert tx.run_key(run_id) is None
    assert b"CLEAR-CARD-1" in stored_bytes(world.url)


def _copy_marker(world: World, source: str, target: str) -> None:
    """Raw SQL: put `source`'s sealed card into `target`'s snapshot (a DBA, or an attacker, moving rows)."""
    with world.service.read() as tx:
        src = tx.load_run(source).stored.input["card"]
        dst = tx.load_run(target).stored
    assert isinstance(src, dict)
    assert "$sealed" in src
    raw = dst.to_json()
    raw["input"]["card"] = src
    sql = "UPDATE runs SET snapshot = ? WHERE run_id = ?"
    _raw_sql(world.url, sql, (json.dumps(raw), target))


def _raw_sql(url: str, statement: str, params: tuple[object, ...]) -> None:
    if url.startswith("sqlite:"):
        import sqlite3

        conn = sqlite3.connect(url[len("sqlite:///") :], timeout=10)
        with conn:
            conn.execute(statement, params)
        conn.close()
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as pg:
        pg.execute(statement.replace("?", "%s").encode(), params)


def test_a_sealed_value_copied_into_another_run_does_not_open(world: World) -> None:
    """The associated data binds a value to its run: moved into another run's row it fails to open,
    with an error that says so (for a reveal and for a command), and verify reports the edit."""
    world.worker.stop() if world.worker else None
    world.worker = None
    a = world.start(CARD, "REF-A")
    b = world.start("4000-OTHER-0002", "REF-B")
    _copy_marker(world, a, b)
    with pytest.raises(Refused, match="does not open under the run's key") as found:
        world.service.reveal.run(world.principal("auditor"), b, channel="test")
    assert found.value.code == "unreadable_sealed_value"
    with pytest.raises(Refused, match="sealed for another run"):
        world.service.cancel(TENANT, b, "stop", "admin")
    assert CARD not in str(found.value)
    problems = [v for v in world.service.verify(b) if not v.ok]
    assert problems
    assert "snapshot differs" in problems[0].problems[0]
    # The run it came from still opens.
    assert world.service.reveal.run(world.principal("auditor"), a, channel="test").input["card"] == CARD


def test_a_sealed_value_copied_into_another_tenants_run_does_not_open(world: World) -> None:
    """Across tenants as well: the other tenant's run has its own key, under its own tenant key."""
    world.worker.stop() if world.worker else None
    world.worker = None
    world.service.principals.create_tenant("other")
    world.engine.publish(world.engine.service.definition_document(TENANT, "pay", 1).document, tenant="other")
    a = world.start(CARD, "REF-A")
    b = world.engine.start("pay", input={"card": "4000-THEIRS-1", "ref": "REF-X"}, tenant="other")
    _copy_marker(world, a, b)
    with pytest.raises(Refused, match="does not open"):
        world.service.cancel("other", b, "stop", "admin")


def test_a_run_input_cannot_forge_a_sealed_value(world: World) -> None:
    """`$sealed` is reserved: an input holding it is refused before anything is written."""
    forged = {"$sealed": "ls1.RunStarted/input/card.AAAA"}
    with pytest.raises(InvalidInput, match="reserved") as found:
        world.engine.start("plain", input={"card": forged}, tenant=TENANT)
    assert found.value.code == "reserved_key"
    with world.service.read() as tx:
        assert tx.runs(TENANT, status=None, definition="plain", after="", limit=10) == []


def test_verify_needs_no_key(world: World) -> None:
    """A process without the key verifies every sealed run: the chain covers the stored markers."""
    run_id = world.through(CARD, CLEAR_REF)
    from lockstep.engine import Engine

    with Engine.open(world.url) as keyless:
        assert keyless.service.keys.ring.provider is None
        report = keyless.verify(run_id)
    assert report[0]["ok"], report


def test_a_worker_cannot_forge_a_sealed_value_either(world: World) -> None:
    """An HTTP worker's `$sealed` output is refused (422 reserved_key); an in-process one fails the
    attempt (InvalidOutput, not retried); the run stays readable either way."""
    from datetime import timedelta

    assert world.worker is not None
    world.worker.stop()
    world.worker = None
    run_id = world.engine.start("plain", input={"card": "CLEAR-2"}, tenant=TENANT)
    (lease,) = world.service.claim("w", ["card.charge"], limit=1, lease_ttl=timedelta(seconds=30))
    forged = {"token": {"$sealed": "ls1.ActivitySucceeded/output/token.AAAA"}}
    with pytest.raises(InvalidInput, match="reserved") as e:
        world.service.complete(lease.task_id, lease.attempt, lease.fencing, forged, strict=True)
    assert e.value.code == "reserved_key"
    world.service.complete(lease.task_id, lease.attempt, lease.fencing, forged)
    shown = world.engine.show(run_id, tenant=TENANT)
    assert shown["status"] == "failed"
    assert shown["steps"]["charge"]["error"]["code"] == "InvalidOutput"
