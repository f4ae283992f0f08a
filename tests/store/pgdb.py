"""Reusable PostgreSQL databases for the store and service suites.

Creating a PostgreSQL database copies and fsyncs its template (about 8 MB) and removing the cluster
deletes every copy: at a hundred and more tests per run that dominates the run time. So a test gets a
database back from a small free list, reset to what a new one would be:

- `empty()`: a database whose `public` schema is empty (created without a template the first time;
  afterwards `DROP SCHEMA public CASCADE` and a new `public`: the tests connect as the superuser, so
  its owner and grants do not matter), so opening it runs the migrations;
- `migrated()`: a database with the current lockstep schema and no rows (migrated once, then emptied
  row by row). A test that changed the schema of such a database (the fingerprint differs) gets it
  dropped instead of reused.

A test that leaves a transaction open makes the reset wait; lock_timeout turns that into an error.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from lockstep.store import open_store

__all__ = ["PgDatabases"]

_FINGERPRINT = """
SELECT md5(string_agg(x, ',' ORDER BY x)) FROM (
    SELECT c.relkind::text || ':' || c.relname || ':' || coalesce(a.attname, '') AS x
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    WHERE n.nspname = 'public'
    UNION ALL
    SELECT 'trigger:' || t.tgname || ':' || t.tgenabled::text FROM pg_trigger t
    JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'public' AND NOT t.tgisinternal
    UNION ALL
    SELECT 'migration:' || version || ':' || checksum FROM schema_migrations
) AS objects
"""

# Emptying a few small tables row by row is much cheaper than TRUNCATE (new files for every table and
# index, fsynced). session_replication_role = replica lets the DELETE pass the append-only trigger.
_EMPTY = """
DO $$
DECLARE r record;
BEGIN
    SET LOCAL session_replication_role = replica;
    FOR r IN SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
               AND c.relname <> 'schema_migrations' LOOP
        EXECUTE format('DELETE FROM %I', r.relname);
    END LOOP;
    FOR r IN SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'public' AND c.relkind = 'S' LOOP
        EXECUTE format('ALTER SEQUENCE %I RESTART', r.relname);
    END LOOP;
END
$$
"""


class PgDatabases:
    """Empty or migrated databases in one cluster, handed out one test at a time and reset after it."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self._empty: list[str] = []
        self._migrated: list[tuple[str, str]] = []
        self._fingerprints: dict[str, str] = {}

    def _connect(self, url: str) -> psycopg.Connection[Any]:
        conn = psycopg.connect(url, autocommit=True)
        conn.execute("SET lock_timeout = '10s'")
        return conn

    def _new(self, prefix: str) -> str:
        return str(self.cluster.create_database(f"{prefix}_{uuid.uuid4().hex[:16]}"))

    def empty(self) -> str:
        """A database with an empty `public` schema."""
        return self._empty.pop() if self._empty else self._new("e")

    def release_empty(self, url: str) -> None:
        with self._connect(url) as conn:
            conn.execute("DROP SCHEMA public CASCADE")
            conn.execute("CREATE SCHEMA public")
        self._empty.append(url)

    def migrated(self) -> str:
        """A database with the current lockstep schema and no rows."""
        if self._migrated:
            url, fingerprint = self._migrated.pop()
        else:
            url = self._new("m")
            open_store(url).close()
            with self._connect(url) as conn:
                fingerprint = _one(conn, _FINGERPRINT)
        self._fingerprints[url] = fingerprint
        return url

    def release_migrated(self, url: str) -> None:
        fingerprint = self._fingerprints.pop(url)
        with self._connect(url) as conn:
            if _one(conn, _FINGERPRINT) != fingerprint:
                reuse = False
            else:
                conn.execute(_EMPTY.encode())
                reuse = True
        if reuse:
            self._migrated.append((url, fingerprint))
        else:
            self.cluster.sql(f'DROP DATABASE "{url.rsplit("/", 1)[1]}" WITH (FORCE)')


def _one(conn: psycopg.Connection[Any], sql: str) -> str:
    row = conn.execute(sql.encode()).fetchone()
    assert row is not None
    return str(row[0])
