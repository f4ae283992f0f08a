"""The external-events check (`events_consumed_twice`), run over every history by the checker: a run
must never take one event twice. Flagged: one event id received twice by one run; one wait (step and
generation) that received two events; one callback used twice."""

from __future__ import annotations

from collections import Counter
from typing import Protocol

from lockstep.core.events import Event, EventReceived

__all__ = ["check_events"]


class Flags(Protocol):
    def flag(self, check: str, example: str) -> None: ...


def check_events(rid: str, events: list[Event], v: Flags) -> None:
    ids: Counter[str] = Counter()
    waits: Counter[tuple[str, int]] = Counter()
    callbacks: Counter[str] = Counter()
    for e in events:
        d = e.data
        if not isinstance(d, EventReceived):
            continue
        ids[d.event_id] += 1
        waits[(d.step, int(d.generation))] += 1
        if d.callback_id:
            callbacks[d.callback_id] += 1
        if ids[d.event_id] > 1:
            v.flag("events_consumed_twice", f"{rid}: event {d.event_id} received again at seq {e.seq}")
        elif waits[(d.step, int(d.generation))] > 1:
            v.flag("events_consumed_twice", f"{rid}: step {d.step} got a second event at seq {e.seq}")
        elif d.callback_id and callbacks[d.callback_id] > 1:
            v.flag("events_consumed_twice", f"{rid}: callback {d.callback_id} used again at seq {e.seq}")
