"""Fixtures for the end-to-end CLI tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from clikit import Cli


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """A CLI runner on a fresh database file in tmp_path."""
    return Cli(tmp_path / "lockstep.db", tmp_path)
