"""Clocks that jump, with real processes under libfaketime: on PostgreSQL workers 10 minutes ahead and
behind and a scheduler stepped +-10 minutes take no lease from a live worker and fire no timer early;
the checker sees no violation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lab.faults.run import run_matrix
from lab.faults.scenarios_clocks import FAKETIME_LIB

pytestmark = pytest.mark.slow


def test_clock_jumps_on_postgresql(tmp_path: Path) -> None:
    """Every worker claims work whatever its clock, no attempt times out, every run completes."""
    if not Path(FAKETIME_LIB).exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{FAKETIME_LIB} is required under CI=true (.ci/run installs faketime)")
        pytest.skip("needs Debian's faketime")
    lines: list[str] = []
    [result] = run_matrix(
        ["postgresql"],
        seed=5,
        runs=9,
        soak=False,
        workdir=tmp_path / "work",
        only=["clock_jumps"],
        say=lines.append,
    )
    assert result.error is None, lines
    assert result.passed, result.examples
    assert result.outcomes["completed"] == 9
    assert result.injected["attempts timed out (leases expired)"] == 0
    for worker in ("ahead", "behind", "jumpy"):
        assert result.injected.get(f"attempts started by {worker}", 0) > 0, result.injected
