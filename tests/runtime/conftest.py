"""Fixtures for tests with real processes: a fresh database of each backend (SQLite file, PostgreSQL
database), the downstream ledger, the test activity module on PYTHONPATH, and a cluster of lockstep
worker/scheduler subprocesses killed in teardown.

`backend` is parametrized over ("sqlite", "postgresql"); a test that is about SQLite itself narrows it
with `@sqlite_only("why")` (prockit.py), which keeps a skipped PostgreSQL case carrying the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prockit import BACKENDS, Cluster, Ledger

from lockstep import Engine


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each backend in turn (PostgreSQL cases skip, or fail under CI=true, without the server binaries)."""
    return str(request.param)


@pytest.fixture
def db_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A fresh database: a new SQLite file in tmp_path, or a new PostgreSQL database with the schema."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'lockstep.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    """The downstream service's ledger (its own SQLite file, whatever lockstep's backend)."""
    return Ledger(tmp_path / "ledger.db")


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """An in-process engine on the test database, to publish, start and read runs quickly."""
    e = Engine.open(db_url)
    try:
        yield e
    finally:
        e.close()


@pytest.fixture
def cluster(tmp_path: Path, db_url: str, ledger: Ledger, engine: Engine) -> Iterator[Cluster]:
    """Starts worker/scheduler subprocesses on the test database; every one is killed afterwards."""
    c = Cluster(tmp_path, db_url, ledger)
    try:
        yield c
    finally:
        c.shutdown()
