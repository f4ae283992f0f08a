"""Fixtures shared by every suite: a throwaway PostgreSQL cluster (one per test session) and a fresh
database per test, cloned from a template that already has the schema.

Without PostgreSQL's server binaries the PostgreSQL tests are skipped with a clear message, except under
CI=true, where a missing PostgreSQL is a failure (the suite must run on both backends there).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from lockstep.testing import PgCluster, find_pg_bin

TEMPLATE = "lockstep_template"


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """One PostgreSQL server for the whole test session (about 2 s to start)."""
    if find_pg_bin() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL server binaries (initdb, pg_ctl) are required under CI=true")
        pytest.skip("PostgreSQL server binaries (initdb) are not installed: PostgreSQL tests skipped")
    cluster = PgCluster().init().start()
    try:
        cluster.create_database(TEMPLATE)
        from lockstep.store import open_store

        open_store(cluster.url(TEMPLATE)).close()  # applies the migrations once
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def pg_url(pg_cluster: PgCluster) -> str:
    """A fresh database with the lockstep schema, cloned from the template (fast: a file copy)."""
    return pg_cluster.create_database(f"t_{uuid.uuid4().hex[:16]}", template=TEMPLATE)


def backend_url(kind: str, tmp_path: object, request: pytest.FixtureRequest) -> str:
    """A fresh database URL of either backend, for suites parametrized over ("sqlite", "postgresql")."""
    if kind == "sqlite":
        return f"sqlite:///{tmp_path}/lockstep.db"
    return str(request.getfixturevalue("pg_url"))
