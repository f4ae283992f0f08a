"""The fault matrix end to end on SQLite, small: a clean scenario passes with zero violations and its
broken build (new idempotency key per attempt) is caught, and the reports say so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.faults.run import run_matrix, write_reports

pytestmark = pytest.mark.slow


def test_a_clean_scenario_passes_and_the_broken_build_is_caught(tmp_path: Path) -> None:
    """lost_response is clean (every effect once per key); with keys per attempt the checker fails it."""
    lines: list[str] = []
    results = run_matrix(
        ["sqlite"],
        seed=3,
        runs=6,
        soak=False,
        workdir=tmp_path / "work",
        only=["lost_response", "broken_key_per_attempt"],
        say=lines.append,
    )
    by_name = {r.name: r for r in results}
    assert set(by_name) == {"lost_response", "broken_key_per_attempt"}, "--only picks by exact name"
    clean, broken = by_name["lost_response"], by_name["broken_key_per_attempt"]
    assert clean.error is None, lines
    assert broken.error is None, lines
    assert clean.passed, clean.examples
    assert sum(clean.violations.values()) == 0
    assert clean.outcomes["completed"] == clean.runs == 6
    assert broken.violations["effects_duplicated"] > 0
    assert broken.passed

    md, js = write_reports(
        results, tmp_path / "reports", {"command": "test", "seed": 3, "runs": 6, "soak": False}
    )
    doc = json.loads(js.read_text())
    assert {s["fault"] for s in doc["scenarios"]} == {"lost_response"}
    assert {s["backend"] for s in doc["scenarios"]} == {"sqlite"}
    assert "caught (broken build)" in md.read_text()
