"""Fixtures for service tests: a SQLite store in tmp_path, a fake clock, raw SQL access for tampering."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lockstep.service import Service
from lockstep.store import Store, open_store

T0 = datetime(2025, 1, 1, tzinfo=UTC)

ORDER: dict[str, Any] = {
    "name": "order",
    "input_schema": {
        "type": "object",
        "required": ["order"],
        "properties": {"order": {"type": "integer"}},
    },
    "steps": [
        {
            "id": "reserve",
            "activity": "inventory.reserve",
            "input": {"order": "${input.order}"},
            "timeout": "30s",
            "retry": {"max_attempts": 3, "initial_interval": "1s"},
            "compensate": {"activity": "inventory.release", "input": {"order": "${input.order}"}},
        },
        {"id": "pause", "wait": "10s"},
        {
            "id": "charge",
            "activity": "payment.charge",
            "input": {"order": "${input.order}"},
            "timeout": "30s",
        },
    ],
}

NAP: dict[str, Any] = {"name": "nap", "steps": [{"id": "nap", "wait": "1h"}]}


class FakeClock:
    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> datetime:
        self.now += timedelta(**kwargs)
        return self.now


class Raw:
    """Raw SQL on the same SQLite file, for checking what is stored and for tampering."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fetch(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=10)
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    def execute(self, sql: str, *params: Any) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=10)
        try:
            conn.execute(sql, params)
        finally:
            conn.close()

    def count(self, table: str) -> int:
        return int(self.fetch(f"SELECT COUNT(*) FROM {table}")[0][0])


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "lockstep.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    s = open_store(f"sqlite:///{db_path}")
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def svc(store: Store, clock: FakeClock) -> Service:
    return Service(store, clock=clock)


@pytest.fixture
def raw(db_path: Path, store: Store) -> Raw:
    return Raw(db_path)
