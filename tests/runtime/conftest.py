"""Fixtures for tests with real processes: a fresh database, the downstream ledger, the test activity
module on PYTHONPATH, and a cluster of lockstep worker/scheduler subprocesses killed in teardown."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prockit import Cluster, Ledger

from lockstep import Engine


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """A URL of a fresh SQLite database file in tmp_path."""
    return f"sqlite:///{tmp_path / 'lockstep.db'}"


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    """The downstream service's ledger (its own SQLite file)."""
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
