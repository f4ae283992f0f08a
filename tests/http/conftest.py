"""Fixtures of the http step tests: a key file, a world per backend (tests/http/httpworld.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from httpworld import World, backend_url, open_world  # tests/http: on sys.path

from lockstep.app.keys import create_key_file

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(autouse=True)
def no_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests say which key each engine has; the developer's environment must not."""
    monkeypatch.delenv("LOCKSTEP_KEY_FILE", raising=False)
    monkeypatch.delenv("LOCKSTEP_KEY", raising=False)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "lockstep.key"
    create_key_file(path)
    return path


@pytest.fixture
def world(backend: str, tmp_path: Path, key_file: Path, request: pytest.FixtureRequest) -> Iterator[World]:
    """An engine on `backend` with a key and the loopback switch, the loopback server, a worker."""
    with ExitStack() as stack:
        w = open_world(backend_url(backend, tmp_path, request), key_file, stack)
        w.start_worker()
        try:
            yield w
        finally:
            if w.worker is not None:
                w.worker.stop()


@pytest.fixture
def sqlite_world(tmp_path: Path, key_file: Path) -> Iterator[World]:
    """The same world on SQLite only (tests of the executor that storage does not change)."""
    with ExitStack() as stack:
        w = open_world(f"sqlite:///{tmp_path}/lockstep.db", key_file, stack)
        w.start_worker()
        try:
            yield w
        finally:
            if w.worker is not None:
                w.worker.stop()
