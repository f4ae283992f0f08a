"""The report's verdict on the default worker slots: the default a user gets is judged against the best
slots measured in the same run, and says so when it was not measured."""

from __future__ import annotations

from typing import Any

from lab.bench.report_engines import _slots_target
from lockstep.runtime.activity import DEFAULT_SLOTS


def _slots(rates: dict[int, float]) -> list[tuple[int, dict[str, Any]]]:
    return [(n, {"throughput.steps_per_s": r}) for n, r in sorted(rates.items())]


def test_a_default_within_ten_percent_of_the_best_is_met() -> None:
    """Default slots at 95% of the best measured: met, naming the best and its slots."""
    [(what, verdict, measured)] = _slots_target("sqlite", _slots({4: 400.0, DEFAULT_SLOTS: 475.0, 99: 500.0}))
    assert f"({DEFAULT_SLOTS})" in what
    assert verdict == "met"
    assert measured == "95% of the best (500 steps/s with 99 slots)"


def test_a_default_far_below_the_best_is_not_met() -> None:
    """Default slots at 80% of the best: not met."""
    [(_, verdict, _)] = _slots_target("postgresql", _slots({DEFAULT_SLOTS: 400.0, 99: 500.0}))
    assert verdict == "**not met**"


def test_a_default_that_was_not_measured_says_so() -> None:
    """Slots measured, but not the default: no verdict; no slots measured at all: no row."""
    [(_, verdict, measured)] = _slots_target("sqlite", _slots({DEFAULT_SLOTS + 1: 500.0}))
    assert verdict == "not measured"
    assert measured == f"{DEFAULT_SLOTS} slots not measured"
    assert _slots_target("sqlite", []) == []
