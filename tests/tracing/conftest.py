"""Fixtures of the tracing tests: each backend, a key for the traced definition's sensitive fields, and
no OTEL_* setting of the developer's environment (each test says how its processes trace)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lockstep.app.keys import create_key_file

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(autouse=True)
def no_tracing_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    monkeypatch.delenv("LOCKSTEP_KEY_FILE", raising=False)
    monkeypatch.delenv("LOCKSTEP_KEY", raising=False)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'lockstep.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "lockstep.key"
    create_key_file(path)
    return path
