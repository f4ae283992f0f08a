"""The least-privilege PostgreSQL roles of docs/production.md, run as written (the SQL is read from the
page): the schema owner migrates; the runtime role runs lockstep end to end, maintains the monthly
event partitions only through the owner's SECURITY DEFINER functions, and is refused every DDL."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from lockstep import Engine, Registry
from lockstep.store import upgrade_store
from lockstep.testing import PgCluster

DOC = Path(__file__).resolve().parents[2] / "docs" / "production.md"
NAP = {"name": "hello", "steps": [{"id": "say", "activity": "t.say", "timeout": "10s"}]}


def _blocks() -> tuple[str, str]:
    """The page's two SQL blocks of the roles section: the superuser's, then the owner's grants."""
    section = DOC.read_text().split("## PostgreSQL roles", 1)[1].split("\n## ", 1)[0]
    setup, grants = re.findall(r"```sql\n(.*?)```", section, re.S)
    return setup, grants


def _statements(block: str, names: dict[str, str]) -> list[str]:
    for old, new in names.items():
        block = re.sub(rf"\b{old}\b", new, block)
    return [s.strip() for s in block.split(";") if s.strip()]


@pytest.fixture
def roles(pg_cluster: PgCluster) -> Iterator[dict[str, str]]:
    """Fresh roles and database named as the page names them, with a unique suffix; dropped afterwards."""
    tag = uuid.uuid4().hex[:8]
    names = {"lockstep_owner": f"owner_{tag}", "lockstep_app": f"app_{tag}", "lockstep": f"db_{tag}"}
    setup, grants = _blocks()
    db = names["lockstep"]
    for statement in _statements(setup, names):
        if statement.startswith("\\connect"):
            continue
        target = db if statement.startswith(("ALTER SCHEMA", "REVOKE")) else "postgres"
        pg_cluster.sql(statement, target)
    owner = f"postgresql://{names['lockstep_owner']}@127.0.0.1:{pg_cluster.port}/{db}"
    upgrade_store(owner)
    with psycopg.connect(owner, autocommit=True) as conn:
        for statement in _statements(grants, names):
            conn.execute(statement.encode())
    names["owner_url"] = owner
    names["app_url"] = f"postgresql://{names['lockstep_app']}@127.0.0.1:{pg_cluster.port}/{db}"
    yield names
    pg_cluster.sql(f'DROP DATABASE "{db}" WITH (FORCE)')
    pg_cluster.sql(f"DROP ROLE {names['lockstep_app']}")
    pg_cluster.sql(f"DROP ROLE {names['lockstep_owner']}")


def test_the_runtime_role_runs_lockstep_end_to_end(roles: dict[str, str]) -> None:
    """As the runtime role: publish, start and a worker completing the run."""
    registry = Registry()
    registry.register("t.say", lambda _input, _ctx: {"said": "hi"})
    engine = Engine.open(roles["app_url"])
    try:
        engine.publish(NAP)
        run = engine.start("hello", input={})
        worker = engine.worker(registry).start()
        try:
            assert engine.wait_for(run, timeout=30)["status"] == "completed"
        finally:
            worker.stop()
    finally:
        engine.close()


def _month(offset: int) -> str:
    now = datetime.now(UTC)
    y, m = divmod(now.year * 12 + now.month - 1 + offset, 12)
    return f"events_y{y:04d}m{m + 1:02d}"


def test_partitions_are_kept_through_the_owners_functions_and_ddl_is_refused(roles: dict[str, str]) -> None:
    """A missing coming month is created and a purged past month dropped by the runtime role through the
    SECURITY DEFINER functions; its own DDL, and the drop function on any other table, are refused."""
    coming = _month(3)
    with psycopg.connect(roles["owner_url"], autocommit=True) as owner:
        owner.execute(f"DROP TABLE {coming}".encode())
        owner.execute(b"SELECT lockstep_ensure_event_partition('2025-01-01')")
    engine = Engine.open(roles["app_url"])
    try:
        engine.service.kernel.store.ensure_partitions()  # what the scheduler does daily
    finally:
        engine.close()
    with psycopg.connect(roles["app_url"], autocommit=True) as app:
        tables = {r[0] for r in app.execute(b"SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        assert coming in tables
        assert app.execute(b"SELECT lockstep_drop_event_partition('events_y2025m01')").fetchone() == (True,)
        assert app.execute(b"SELECT to_regclass('events_y2025m01')").fetchone() == (None,)
        for ddl in ("DROP TABLE events", "ALTER TABLE runs ADD COLUMN x INT", "CREATE TABLE mine (x INT)"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                app.execute(ddl.encode())
        with pytest.raises(psycopg.errors.RaiseException, match="not a monthly events partition"):
            app.execute(b"SELECT lockstep_drop_event_partition('runs')")
        with pytest.raises(psycopg.errors.RaiseException, match="no partition events_y2099m01"):
            app.execute(b"SELECT lockstep_drop_event_partition('events_y2099m01')")
