"""The checker's `events_consumed_twice` flags a history in which a run took one event twice (by id, by
wait generation, by callback), and nothing in a clean one: a green event_replay report means something."""

from __future__ import annotations

from typing import Any

from lab.faults.checker import Verdict
from lab.faults.eventcheck import check_events
from lockstep.core.events import Event

T = "2026-01-01T00:00:00Z"


def received(seq: int, event_id: str, generation: int = 2, callback: str | None = None) -> Event:
    data: dict[str, Any] = {
        "step": "arrived",
        "generation": generation,
        "event_id": event_id,
        "name": "goods-arrived",
        "key": "r1",
        "payload": {},
        "via": "callback" if callback else "api",
        "callback_id": callback,
    }
    return Event.from_json({"seq": seq, "type": "EventReceived", "at": T, "v": 1, "data": data})


def flags(events: list[Event]) -> dict[str, int]:
    v = Verdict()
    check_events("run1", events, v)
    return {k: n for k, n in v.violations.items() if n}


def test_a_clean_history_is_not_flagged() -> None:
    """One event per wait (a loop's second wait, another generation, may take another)."""
    assert flags([received(3, "e1"), received(9, "e2", generation=7)]) == {}


def test_one_event_id_received_twice_is_flagged() -> None:
    """The same id twice, even on two visits of the step, is a double delivery."""
    assert flags([received(3, "e1"), received(9, "e1", generation=7)]) == {"events_consumed_twice": 1}


def test_one_wait_taking_two_events_is_flagged() -> None:
    """Two events for one generation: the wait consumed twice."""
    assert flags([received(3, "e1"), received(4, "e2")]) == {"events_consumed_twice": 1}


def test_one_callback_used_twice_is_flagged() -> None:
    """A callback accepted on two waits."""
    events = [received(3, "callback:cb1", callback="cb1"), received(9, "callback:cbX", 7, callback="cb1")]
    assert flags(events) == {"events_consumed_twice": 1}
