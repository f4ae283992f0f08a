"""Secrets by reference, on both backends: an http step uses one by name, and its clear value is in no
stored byte (SQLite files or pg_dump), no log line and no event; rotation, pinning, deletion; another
tenant's step cannot name it; no role can read it back over the API or the CLI."""

from __future__ import annotations

import json
import logging
import secrets as random
import sqlite3
from pathlib import Path

import pytest
from httpworld import OTHER, TENANT, World, definition

from lockstep.app.observability import configure_logging, log_events
from lockstep.errors import NotFound
from lockstep.testing import pg_dump


def _stored(url: str) -> bytes:
    """Every stored byte: the SQLite database after a checkpoint (and its WAL), or `pg_dump` output."""
    if url.startswith("sqlite:"):
        path = Path(url[len("sqlite:///") :])
        conn = sqlite3.connect(path, timeout=10)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
        extra = [path.with_name(path.name + s) for s in ("-wal", "-journal")]
        return path.read_bytes() + b"".join(p.read_bytes() for p in extra if p.exists())
    return pg_dump(url)


def _auth(world: World, name: str, **auth: object) -> dict:
    return definition(name, {"url": world.server.url("/echo-auth"), "auth": {"secret": "pay-key", **auth}})


def test_a_secret_is_sent_by_reference_and_never_stored_logged_or_recorded_in_clear(
    world: World, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """The server gets the value; the output, the events, the database and the logs never hold it."""
    configure_logging("DEBUG")
    world.service.listeners.append(log_events)
    caplog.set_level(logging.DEBUG)
    value = "sk_live_" + random.token_hex(16)
    world.allow_loopback()
    world.service.secrets.set(TENANT, "pay-key", value, actor="admin")
    shown = world.run(_auth(world, "charge"))
    assert shown["status"] == "completed", shown
    assert world.server.seen[0].headers["Authorization"] == f"Bearer {value}"
    out = shown["output"]
    assert out["auth"] == {"secret": "pay-key", "version": 1}
    assert out["body"]["auth"] == "Bearer [secret pay-key]"  # the server echoed it: scrubbed
    assert out["headers"]["x-echo"] == "Bearer [secret pay-key]"
    events = json.dumps(world.events(shown["run_id"]))
    assert value not in events
    assert '"secret": "pay-key"' in events  # the task input names it
    blob = _stored(world.url)
    assert b"pay-key" in blob, "the scan is real: the secret's name is stored"
    assert value.encode() not in blob, "the secret is stored in clear"
    if world.worker is not None:
        world.worker.stop()
        world.worker = None
    logs = capsys.readouterr().err + caplog.text
    assert "ActivityCompleted" in logs or "RunCompleted" in logs, "the logs were not captured"
    assert value not in logs
    rows = world.audit("secret.set")
    assert [r["detail"]["version"] for r in rows] == [1]
    assert value not in json.dumps(rows)


def test_rotation_adds_a_version_and_a_pinned_step_keeps_its_own(world: World) -> None:
    """Setting a secret again is version 2, used by default; `auth.version: 1` keeps the first."""
    world.allow_loopback()
    world.service.secrets.set(TENANT, "pay-key", "first-value", actor="admin")
    world.service.secrets.set(TENANT, "pay-key", "second-value", actor="admin")
    (listed,) = world.service.secrets.list(TENANT)
    assert listed.latest == 2
    assert [v.version for v in listed.versions] == [1, 2]
    assert "value" not in json.dumps(listed.plain())
    newest = world.run(_auth(world, "newest"))
    pinned = world.run(_auth(world, "pinned", version=1))
    assert newest["output"]["auth"]["version"] == 2
    assert pinned["output"]["auth"]["version"] == 1
    assert [s.headers["Authorization"] for s in world.server.seen] == [
        "Bearer second-value",
        "Bearer first-value",
    ]


def test_a_header_scheme_sends_the_secret_in_the_named_header(world: World) -> None:
    """`scheme: header X-Api-Key` sends the value there and no Authorization header."""
    world.allow_loopback()
    world.service.secrets.set(TENANT, "pay-key", "k-123456", actor="admin")
    shown = world.run(_auth(world, "header", scheme="header X-Api-Key"))
    assert shown["status"] == "completed"
    assert world.server.seen[0].headers["X-Api-Key"] == "k-123456"
    assert "Authorization" not in world.server.seen[0].headers


def test_a_deleted_secret_cannot_be_used_and_its_key_is_destroyed(world: World) -> None:
    """After delete the step fails (not retried) with SecretUnavailable, audited; the key row is gone."""
    world.allow_loopback()
    world.service.secrets.set(TENANT, "pay-key", "gone-soon", actor="admin")
    done = world.service.secrets.delete(TENANT, "pay-key", actor="admin")
    assert done.key_destroyed
    shown = world.run(_auth(world, "deleted"))
    assert shown["status"] == "failed"
    assert shown["error"]["code"] == "SecretUnavailable"
    assert world.server.seen == []
    (row,) = world.audit("secret.use")
    assert row["outcome"] == "refused"
    assert row["detail"]["run"] == shown["run_id"]
    with pytest.raises(NotFound):
        world.service.secrets.delete(TENANT, "pay-key", actor="admin")
    world.service.secrets.set(TENANT, "pay-key", "again", actor="admin")  # a new key: usable again
    assert world.run(_auth(world, "again"))["status"] == "completed"


def test_another_tenants_step_cannot_name_the_secret(world: World) -> None:
    """Tenant other's step naming pay-key (acme's) finds no secret of other: refused, nothing sent."""
    world.service.secrets.set(TENANT, "pay-key", "acme-only-value", actor="admin")
    world.allow_loopback()
    world.allow_loopback(OTHER)
    shown = world.run(_auth(world, "steal"), tenant=OTHER)
    assert shown["status"] == "failed"
    assert shown["error"]["code"] == "SecretUnavailable"
    assert "acme-only-value" not in json.dumps(shown)
    assert world.server.seen == []
    (row,) = world.audit("secret.use", tenant=OTHER)
    assert row["outcome"] == "refused"
    assert world.audit("secret.use", tenant=TENANT) == []
