"""Fixtures for the external-events tests: an engine with a key file on each backend and a fake clock,
tenants acme and globex with a user per role (publisher included), a synchronous client over the app."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from eventkit import PARCELS, Client, FakeClock, Tenant, make_tenant

from lockstep.api.app import create_app
from lockstep.app.keys import create_key_file
from lockstep.engine import Engine

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(autouse=True)
def no_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCKSTEP_KEY_FILE", raising=False)
    monkeypatch.delenv("LOCKSTEP_KEY", raising=False)


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/lockstep.db"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def engine(db_url: str, clock: FakeClock, tmp_path: Path) -> Iterator[Engine]:
    key = tmp_path / "lockstep.key"
    create_key_file(key)
    e = Engine.open(db_url, clock=clock, keys=key)
    try:
        yield e
    finally:
        e.close()


@pytest.fixture
def acme(engine: Engine) -> Tenant:
    t = make_tenant(engine, "acme")
    engine.service.publish("acme", PARCELS)
    return t


@pytest.fixture
def globex(engine: Engine) -> Tenant:
    t = make_tenant(engine, "globex")
    engine.service.publish("globex", PARCELS)
    return t


@pytest.fixture
def client(engine: Engine) -> Client:
    return Client(create_app(engine.service, public_url="https://lockstep.example"))
