"""docs/production.md's upgrade order, on both backends: a newer build's additive migration, applied by
`db upgrade` while an engine of the current build is open, leaves that engine working (runs started
before and after it complete), the newer build opens the database, and the current build, opened
again, is refused. The newer build is simulated: the same code with one more migration."""

from __future__ import annotations

import importlib

import pytest

from lockstep import Engine, Registry
from lockstep.errors import LockstepError
from lockstep.store import upgrade_store
from lockstep.store.migrate import Migration, migrations

NAP = {"name": "hello", "steps": [{"id": "say", "activity": "t.say", "timeout": "10s"}]}
# What the shipped migrations do to what older code uses: add tables and columns with defaults.
ADDITIVE = (
    "CREATE TABLE probe_added (x INTEGER);\n"
    "ALTER TABLE runs ADD COLUMN probe_note TEXT NOT NULL DEFAULT '';\n"
)


def test_an_open_engine_keeps_working_across_a_newer_builds_upgrade(backend, url, monkeypatch):
    """Old engine open -> newer build's `db upgrade` -> old engine completes runs; new build opens; the
    old build is refused on its next start ("newer than this lockstep")."""
    registry = Registry()
    registry.register("t.say", lambda _input, _ctx: {"said": "hi"})
    old = Engine.open(url)
    try:
        old.publish(NAP)
        before = old.start("hello", input={})
        shipped = migrations(backend.package)
        probe = Migration(shipped[-1].version + 1, "probe", ADDITIVE)
        adapter = importlib.import_module(f"{backend.package}.adapter")
        monkeypatch.setattr(adapter, "migrations", lambda package: [*migrations(package), probe])
        assert upgrade_store(url) == [f"{probe.version:04d}_probe"]  # the newer build's `db upgrade`
        after = old.start("hello", input={})
        worker = old.worker(registry).start()
        try:
            for run in (before, after):
                assert old.wait_for(run, timeout=30)["status"] == "completed"
        finally:
            worker.stop()
    finally:
        old.close()
    with Engine.open(url) as new:  # the newer build: its schema is there
        assert new.wait_for(after, timeout=5)["status"] == "completed"
    monkeypatch.undo()  # the current build again, restarted after the upgrade
    with pytest.raises(LockstepError, match="newer than this lockstep"):
        Engine.open(url)
