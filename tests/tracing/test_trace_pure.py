"""The pure parts of tracing: W3C traceparent parsing, derived ids, the trace a start records, and the
spans a history implies (over the golden histories): one tree per run, times equal to the events', and
the spans emitted command by command equal to those of the whole history folded at once."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from lockstep.app.tracing import (
    SpanRef,
    ended_spans,
    format_traceparent,
    history_spans,
    new_trace,
    parse_traceparent,
)
from lockstep.app.tracing.ids import derived_id, run_trace
from lockstep.core.decide import decide
from lockstep.core.events import Event
from lockstep.core.evolve import evolve
from lockstep.core.state import RunState

GOLDEN = Path(__file__).parents[1] / "core" / "golden"


def test_a_valid_traceparent_round_trips() -> None:
    text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    ref = parse_traceparent(text)
    assert ref == SpanRef(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, 1)
    assert format_traceparent(ref) == text
    assert parse_traceparent(" " + text + " ") == ref  # surrounding blanks, as headers may carry


def test_a_later_version_may_carry_more_fields() -> None:
    """W3C: a receiver parses a higher version's known part and ignores what follows."""
    ref = parse_traceparent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes")
    assert ref is not None
    assert ref.span_id == 0x00F067AA0BA902B7


@pytest.mark.parametrize(
    "bad",
    [None, "", "00", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", "0-1-2-3", "x" * 600],
)
def test_what_is_not_a_traceparent_is_none(bad: str | None) -> None:
    assert parse_traceparent(bad) is None


def test_span_ids_are_derived_stable_and_distinct() -> None:
    """The same parts give the same id in any process; different parts (almost surely) different ones."""
    a = derived_id("t", "run-1", "attempt", "run-1/s/a1-2", 3)
    assert a == derived_id("t", "run-1", "attempt", "run-1/s/a1-2", 3)
    assert a != derived_id("t", "run-1", "attempt", "run-1/s/a1-2", 4)
    assert 0 < a < 2**64


def test_a_start_joins_the_callers_trace_or_begins_its_own() -> None:
    caller = SpanRef(0xABC, 0xDEF, 0)  # not sampled: the run is not either
    trace, parent = new_trace(caller)
    ref = parse_traceparent(trace)
    assert ref is not None
    assert (ref.trace_id, ref.flags, parent) == (0xABC, 0, f"{0xDEF:016x}")
    mine, none = new_trace(None)
    assert none is None
    assert parse_traceparent(mine) is not None
    assert parse_traceparent(mine) != parse_traceparent(new_trace(None)[0])


def _golden(name: str) -> list[Event]:
    return [Event.from_json(e) for e in json.loads((GOLDEN / name).read_text())["events"]]


@pytest.mark.parametrize("name", sorted(p.name for p in GOLDEN.glob("*.json")))
def test_a_histories_spans_form_one_tree_with_the_events_times(name: str) -> None:
    """Every parent is in the run's spans (the root's is the caller's, or none; a run not finished has
    not emitted its root nor the spans still open); every start and end is an event's time."""
    events = _golden(name)
    spans = history_spans(events)
    ids = {s.span_id for s in spans}
    trace = run_trace(evolve(None, events[0]))
    times = {e.at for e in events}
    finished = events[-1].type in ("RunCompleted", "RunFailed", "RunCancelled")
    assert any(s.kind == "run" for s in spans) == finished
    for s in spans:
        assert s.trace == trace
        assert s.start in times
        assert s.end in times
        assert s.start <= s.end
        if s.kind == "run":
            assert s.parent_id == trace.parent
        else:
            assert s.parent_id in ids or not finished, s.name  # an open span is emitted when it ends
    assert len(ids) == len(spans)


def _recorder() -> Any:
    spec = importlib.util.spec_from_file_location("make_golden", GOLDEN / "make_golden.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("scenario", sorted(_recorder().SCENARIOS))
def test_spans_emitted_command_by_command_are_the_historys(scenario: str) -> None:
    """Replaying each golden run one command at a time, as processes commit them, the spans each
    command ends add up to exactly the spans of the whole history folded at once."""
    golden = _recorder()
    live: list[Any] = []
    original = golden.Recorder.send

    def send(self: Any, command: Any) -> None:
        before: RunState | None = self.state
        new = decide(self.state, command, self.now, self.d)
        original(self, command)
        live.extend(ended_spans(before, new, self.state))

    golden.Recorder.send = send
    try:
        recorder = golden.SCENARIOS[scenario][1]()
    finally:
        golden.Recorder.send = original
    assert live == history_spans(recorder.events)


@pytest.mark.parametrize(
    "name",
    ["parallel_branches_compensated.json", "for_each_with_concurrency.json", "parallel_any_with_cancel.json"],
)
def test_branches_and_items_are_spans_under_their_shape_steps_span(name: str) -> None:
    """A branch or an item is a span under its parallel or for-each step's span; a step inside it is
    that lane's child, and every attempt of every lane is a span (several were in flight at once)."""
    events = _golden(name)
    spans = history_spans(events)
    by_id = {s.span_id: s for s in spans}
    lanes = [s for s in spans if s.kind == "lane"]
    assert lanes
    for lane in lanes:
        parent = by_id[lane.parent_id]
        assert parent.kind == "step"
        assert parent.attributes["lockstep.step"] == lane.attributes["lockstep.step"]
    for s in spans:
        if s.kind == "step" and "lockstep.lane" in s.attributes:
            parent = by_id[s.parent_id]
            assert parent.kind == "lane"
            assert parent.attributes["lockstep.lane"] == s.attributes["lockstep.lane"]
    leased = {(e.data.task_id, e.data.fencing) for e in events if e.type == "ActivityStarted"}
    attempted = {
        (s.attributes["lockstep.task_id"], s.attributes["lockstep.fencing"])
        for s in spans
        if s.kind == "attempt"
    }
    assert attempted == leased
