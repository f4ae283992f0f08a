"""The stored snapshot's text (RunState.snapshot_text, orjson writing the step, attempt and timer
dataclasses itself) is exactly compact_json of the snapshot document, for every state of every golden
history, and for values orjson refuses (the stdlib fallback)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from lockstep.core.canonical import compact_json, parse_json
from lockstep.core.events import Event
from lockstep.core.evolve import evolve
from lockstep.core.state import RunState

GOLDEN = sorted((Path(__file__).parent / "golden").glob("*.json"))


def _states(path: Path) -> list[RunState]:
    record = json.loads(path.read_text(encoding="utf-8"))
    states: list[RunState] = []
    state: RunState | None = None
    for e in record["events"]:
        state = evolve(state, Event.from_json(e))
        states.append(state)
    return states


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_snapshot_text_is_the_compact_json_of_every_state(path: Path) -> None:
    """Each state a golden history passes through is stored as the same text as before."""
    states = _states(path)
    assert states
    for state in states:
        assert state.snapshot_text() == compact_json(state.to_json(copy_values=False))
        assert RunState.from_json(parse_json(state.snapshot_text())) == state


def test_values_orjson_refuses_fall_back_to_the_stdlib() -> None:
    """An integer beyond 64 bits in a step's output is written (exactly) by the stdlib encoder."""
    state = _states(GOLDEN[0])[-1]
    sid = next(iter(state.steps))
    big = replace(state, steps={**state.steps, sid: replace(state.steps[sid], output={"n": 2**70})})
    text = big.snapshot_text()
    assert text == compact_json(big.to_json(copy_values=False))
    assert parse_json(text)["steps"][sid]["output"] == {"n": 2**70}
