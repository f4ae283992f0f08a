"""Fixtures for the end-to-end CLI tests: a CLI runner on a fresh database of each backend."""

from __future__ import annotations

from pathlib import Path

import pytest
from clikit import BACKENDS, Cli, fresh_url


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each backend in turn (PostgreSQL cases skip, or fail under CI=true, without the server binaries)."""
    return str(request.param)


@pytest.fixture
def cli(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Cli:
    """A CLI runner on a fresh database of `backend` (PostgreSQL: with the schema already applied)."""
    return Cli(fresh_url(backend, tmp_path, request), tmp_path)
