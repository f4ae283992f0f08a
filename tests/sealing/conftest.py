"""Fixtures for the sealing tests: a key file, an engine with that key on each backend, tenant acme with
an approver, a viewer without the read_sensitive grant and an auditor with it, an in-process worker,
and an HTTP client over the app."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from sealworld import World, open_world  # tests/sealing: on sys.path

from lockstep.app.keys import create_key_file

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(autouse=True)
def no_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests say which key each engine has; the developer's environment must not."""
    monkeypatch.delenv("LOCKSTEP_KEY_FILE", raising=False)
    monkeypatch.delenv("LOCKSTEP_KEY", raising=False)


def backend_url(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path}/lockstep.db"
    return str(request.getfixturevalue("pg_url"))


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
    """Tenant acme, PAY and PLAIN published, a worker in this process, on `backend`, with a key."""
    with ExitStack() as stack:
        w = open_world(backend_url(backend, tmp_path, request), key_file, stack)
        w.start_worker()
        try:
            yield w
        finally:
            if w.worker is not None:
                w.worker.stop()
            w.engine.close()
