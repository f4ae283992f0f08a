"""The event codec: stored events read back exactly as stored (the hash chain is over that form), in one
typed pass when they fit their record, kept as stored when they do not; unknown kinds are refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lockstep.core.canonical import compact_json
from lockstep.core.events import (
    EVENT_TYPES,
    RECORDS,
    UNSET,
    ActivityScheduled,
    Event,
    TimerScheduled,
    chain_hash,
    chain_link,
    data_of,
)
from lockstep.core.narrate import narrate, sentence

GOLDEN = Path(__file__).parent / "golden"


def _events(pattern: str) -> list[dict[str, Any]]:
    return [raw for p in sorted(GOLDEN.glob(pattern)) for raw in json.loads(p.read_text("utf-8"))["events"]]


STORED = _events("**/*.json")  # every build's golden histories
CURRENT = _events("*.json")  # written by this build's make_golden.py


def _row(raw: dict[str, Any]) -> Event:
    return Event.from_row(raw["seq"], raw["type"], raw["at"], raw["v"], compact_json(raw["data"]))


def test_every_event_type_has_one_record() -> None:
    assert set(RECORDS) == EVENT_TYPES
    assert len(EVENT_TYPES) == 55
    assert all(cls.type == name and cls.__name__ == name for name, cls in RECORDS.items())


@pytest.mark.parametrize("raw", STORED, ids=[f"{r['seq']}-{r['type']}" for r in STORED])
def test_a_stored_event_reads_back_as_stored_through_its_record(raw: dict[str, Any]) -> None:
    """Every golden event (all builds) fits its record: it is read typed, from a row or from JSON alike,
    and writes back the very object it was read from."""
    e = _row(raw)
    assert e.stored is None
    assert isinstance(e.data, RECORDS[raw["type"]])
    assert e == Event.from_json(raw)
    assert e.to_json() == raw
    assert chain_hash("h", "run", e) == chain_link("h", "run", raw)
    assert narrate(raw["type"], raw["data"], raw["at"]) == sentence(e.data, e.at)


@pytest.mark.parametrize("raw", CURRENT, ids=[f"{r['seq']}-{r['type']}" for r in CURRENT])
def test_records_declare_their_fields_in_the_order_the_engine_writes_them(raw: dict[str, Any]) -> None:
    """The golden files keep the data keys in the order the engine wrote them: a record's field order is
    that order, so the stored data text (orjson keeps the order) is what it was."""
    assert list(Event.from_json(raw).data_json()) == list(raw["data"])


def _scheduled() -> dict[str, Any]:
    return next(raw for raw in CURRENT if raw["type"] == "ActivityScheduled")


ODD = {
    "a field this build does not know": lambda d: {**d, "added_later": [1, 2]},
    "a field missing": lambda d: {k: v for k, v in d.items() if k != "max_attempts"},
    "a value of another type": lambda d: {**d, "attempt": "1"},
    "a null where a value belongs": lambda d: {**d, "priority": None},
    "an integer beyond 64 bits": lambda d: {**d, "input": {"n": 123456789012345678901234567890}},
}


@pytest.mark.parametrize("odd", sorted(ODD))
def test_stored_data_that_does_not_fit_its_record_is_kept_exactly(odd: str) -> None:
    """Whatever a row holds (a downgrade, a hand edit), reading it never changes what is hashed."""
    raw = _scheduled()
    changed = {**raw, "data": ODD[odd](raw["data"])}
    for e in (_row(changed), Event.from_json(changed)):
        assert e.to_json() == changed
        assert chain_hash("h", "run", e) == chain_link("h", "run", changed)
        assert isinstance(e.data, ActivityScheduled)
        assert e.data.step == raw["data"]["step"]


def test_a_field_absent_from_older_histories_stays_absent() -> None:
    raw = _scheduled()
    old = {**raw, "data": {k: v for k, v in raw["data"].items() if k != "priority"}}
    e = _row(old)
    assert e.stored is None
    assert e.data.priority is UNSET
    assert e.to_json() == old
    wait = TimerScheduled(key="wait:a", generation=2, kind="wait", step="a", fire_at="2024-01-01T00:00:00Z")
    assert "attempt" not in Event(wait, "2024-01-01T00:00:00Z", 2).data_json()


def test_an_unknown_event_type_or_schema_version_is_refused_with_a_message() -> None:
    raw = _scheduled()
    with pytest.raises(ValueError, match="unknown event type 'ActivityScheduledX'"):
        Event.from_json({**raw, "type": "ActivityScheduledX"})
    with pytest.raises(ValueError, match="schema version 2"):
        _row({**raw, "v": 2})
    with pytest.raises(ValueError, match="not a JSON object"):
        Event.from_json({**raw, "data": [1]})
    assert narrate("SomethingNew", {}) == "SomethingNew"
    assert data_of("RunCompleted", {"output": 1}).type == "RunCompleted"
