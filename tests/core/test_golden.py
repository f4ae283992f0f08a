"""Golden histories: recorded runs must still replay to their recorded snapshot.

The files in golden/ stand for runs already stored by an older build (see golden/make_golden.py). A
change to evolve(), the event format or canonical JSON that breaks them breaks old runs in production.

golden/v1/, golden/v2/ and golden/v3/ keep the first four scenarios as recorded by older builds (v1:
unversioned snapshots and task ids without the scheduling seq; v2: snapshots before the `paused` field;
v3: snapshots before four-eyes proposals and the per-task count of ignored results); golden/v4/ keeps
five (snapshots before the trace context, step visits and the compensation's start); golden/v5/ keeps
six (snapshots before the lanes and groups of parallel and for-each steps, and before child runs):
make_golden.py never
rewrites them. Their events must still replay, and their snapshots are outdated:
loading one raises OutdatedSnapshot and the store rebuilds the state with fold(events).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lockstep.core.definition import parse_definition
from lockstep.core.events import EVENT_TYPES, SCHEMA_VERSION, Event, chain_hash
from lockstep.core.evolve import evolve, fold
from lockstep.core.explain import explain
from lockstep.core.state import SNAPSHOT_VERSION, OutdatedSnapshot, RunState
from lockstep.core.timeutil import parse_iso

GOLDEN = Path(__file__).parent / "golden"
FILES = sorted(GOLDEN.glob("*.json"))
# Runs stored by older builds: v1 (unversioned snapshots, old task ids), v2 (before `paused`), v3 (before
# four-eyes proposals), v4 (before the trace context and step visits), v5 (before lanes and groups).
OLD_FILES = sorted(GOLDEN.glob("v*/*.json"))
OLD_SCENARIOS = {
    "happy_path_with_retry",
    "failure_with_compensation",
    "cancellation_with_compensation",
    "at_most_once_needs_attention",
}
EXPECTED_STATUS = {
    "happy_path_with_retry": "completed",
    "failure_with_compensation": "failed",
    "cancellation_with_compensation": "cancelled",
    "at_most_once_needs_attention": "needs_attention",
    "four_eyes_skip": "completed",
    "traced_loop_with_approval": "completed",
    "parallel_branches_compensated": "failed",
    "for_each_with_concurrency": "completed",
    "parallel_any_with_cancel": "cancelled",
    "child_run_parent": "completed",
    "child_run_child": "completed",
    "events_received_by_callback": "completed",
    "events_wait_timed_out": "failed",
    "forms_two_approvers_with_values": "completed",
    "http_call_retried": "completed",
    "migapproval_granted": "completed",
}
# The scenarios recorded by the build of snapshot version 4 (golden/v4/), and of version 5 (golden/v5/).
V4_SCENARIOS = {*OLD_SCENARIOS, "four_eyes_skip"}
V5_SCENARIOS = {*V4_SCENARIOS, "traced_loop_with_approval"}


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def _events(record: dict[str, Any]) -> list[Event]:
    return [Event.from_json(e) for e in record["events"]]


def _load_like_the_store(snapshot: dict[str, Any], events: list[Event]) -> RunState:
    """The store's rule (sqltx/runs.py _loaded): the stored snapshot, or a rebuild if it is outdated."""
    try:
        return RunState.from_json(snapshot)
    except OutdatedSnapshot:
        state = fold(events)
        assert state is not None
        return state


def test_golden_files_are_present() -> None:
    """Every golden scenario has its recorded file; the first four also in each older format."""
    assert {p.stem for p in FILES} == set(EXPECTED_STATUS)
    for folder in ("v1", "v2", "v3"):
        assert {p.stem for p in OLD_FILES if p.parent.name == folder} == OLD_SCENARIOS
    assert {p.stem for p in OLD_FILES if p.parent.name == "v4"} == V4_SCENARIOS
    assert {p.stem for p in OLD_FILES if p.parent.name == "v5"} == V5_SCENARIOS


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_recorded_snapshot_has_the_current_snapshot_version(path: Path) -> None:
    """The golden snapshots are of this build's snapshot version."""
    assert _load(path)["snapshot"]["snapshot_version"] == SNAPSHOT_VERSION


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_replay_equals_recorded_snapshot(path: Path) -> None:
    """Folding the recorded events gives the recorded value of every recorded snapshot field."""
    record = _load(path)
    state = fold(_events(record))
    assert state is not None
    replayed = state.to_json()
    recorded = record["snapshot"]
    assert {k: replayed.get(k) for k in recorded} == recorded
    assert state.status == EXPECTED_STATUS[path.stem]


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_recorded_snapshot_loads_equal_to_replay(path: Path) -> None:
    """The stored snapshot, loaded by this build (as the store does), equals this build's replay."""
    record = _load(path)
    state = fold(_events(record))
    assert state is not None
    assert RunState.from_json(record["snapshot"]).to_json() == state.to_json()


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_replay_event_by_event_is_well_formed(path: Path) -> None:
    """Every recorded event has a known type and schema version, and seq runs 1..n without gaps."""
    record = _load(path)
    state: RunState | None = None
    for i, raw in enumerate(record["events"], start=1):
        assert raw["type"] in EVENT_TYPES, f"unknown event type {raw['type']}"
        assert 1 <= raw["v"] <= SCHEMA_VERSION
        assert raw["seq"] == i
        e = Event.from_json(raw)
        assert e.to_json() == raw  # the stored form survives a read and write unchanged
        state = evolve(state, e)
        assert state.seq == i
        parse_iso(e.at)
    assert state is not None


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_recorded_snapshot_round_trips_and_explains(path: Path) -> None:
    """A stored snapshot writes back identically after loading, and explain() reads it."""
    record = _load(path)
    state = RunState.from_json(record["snapshot"])
    assert state.to_json() == record["snapshot"]
    info = explain(state, parse_iso(state.updated_at))
    assert (info["wait_reason"] is None) == state.terminal


# Snapshot fields added after the first golden histories were recorded (commit 576e50e): a snapshot
# stored by that build lacks them. Loading it as it is would give last_output_step=None where the
# replay sets it, so every snapshot of an older version is outdated and rebuilt from its events.
ADDED_SNAPSHOT_FIELDS = ("last_output_step", "approval")


def _without_version(snapshot: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in snapshot.items() if k != "snapshot_version"}


OLD_SNAPSHOTS = {
    "unversioned": _without_version,
    "before added fields": lambda s: {
        k: v for k, v in _without_version(s).items() if k not in ADDED_SNAPSHOT_FIELDS
    },
    "version 1": lambda s: {**s, "snapshot_version": 1},
    "version 0": lambda s: {**s, "snapshot_version": 0},
}


@pytest.mark.parametrize("old", sorted(OLD_SNAPSHOTS))
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_snapshot_of_an_older_version_is_outdated_and_rebuilt_equal_to_replay(path: Path, old: str) -> None:
    """A snapshot without snapshot_version, or with an older one, is refused by from_json
    (OutdatedSnapshot), even when every field it has is right; the rebuild from the recorded events
    equals the replay and the recorded current snapshot."""
    record = _load(path)
    snapshot = OLD_SNAPSHOTS[old](record["snapshot"])
    with pytest.raises(OutdatedSnapshot):
        RunState.from_json(snapshot)
    replay = fold(_events(record))
    assert replay is not None
    rebuilt = _load_like_the_store(snapshot, _events(record))
    assert rebuilt.to_json() == replay.to_json() == record["snapshot"]
    assert RunState.from_json(rebuilt.to_json()).to_json() == rebuilt.to_json()  # writing it back fixes it


@pytest.mark.parametrize("path", OLD_FILES, ids=[f"{p.parent.name}-{p.stem}" for p in OLD_FILES])
def test_old_history_replays_and_its_snapshot_is_rebuilt(path: Path) -> None:
    """A run stored by an older build: its events still replay, its chain still verifies, its snapshot is
    outdated and the rebuild keeps every value it recorded (fields added since take their defaults)."""
    record = _load(path)
    events = _events(record)
    assert record["snapshot"].get("snapshot_version") != SNAPSHOT_VERSION
    with pytest.raises(OutdatedSnapshot):
        RunState.from_json(record["snapshot"])
    rebuilt = _load_like_the_store(record["snapshot"], events).to_json()
    old = {k: v for k, v in record["snapshot"].items() if k != "snapshot_version"}
    # Fields added since to each step (its visit) take their values; those it recorded are kept.
    rebuilt["steps"] = {
        sid: {k: st[k] for k in old["steps"].get(sid, st)} for sid, st in rebuilt["steps"].items()
    }
    assert {k: rebuilt[k] for k in old} == old
    assert rebuilt["snapshot_version"] == SNAPSHOT_VERSION
    assert rebuilt["status"] == EXPECTED_STATUS[path.stem]
    head = ""
    for e in events:
        head = chain_hash(head, record["run_id"], e)
    assert head == record["chain_head"]


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("v4/*.json")), ids=lambda p: p.stem)
def test_events_recorded_before_the_trace_context_are_byte_identical_today(path: Path) -> None:
    """The events a version-4 build stored are exactly the events this build writes for the same run
    (an untraced RunStarted has no trace fields), so their hashes hold."""
    old = _load(path)
    new = _load(GOLDEN / path.name)
    assert [Event.from_json(e).to_json() for e in old["events"]] == old["events"] == new["events"]
    assert "trace" not in old["events"][0]["data"]


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("v5/*.json")), ids=lambda p: p.stem)
def test_events_recorded_before_lanes_are_byte_identical_today(path: Path) -> None:
    """A run without parallel, for-each or run steps is written today exactly as the version-5 build
    wrote it (the same events, the same hashes): only the snapshot gained the (empty) lanes and groups,
    and no parent or children."""
    old = _load(path)
    new = _load(GOLDEN / path.name)
    assert old["events"] == new["events"]
    assert old["chain_head"] == new["chain_head"]
    added = ("lanes", "groups", "parent", "children")
    snapshot = {k: v for k, v in new["snapshot"].items() if k not in added}
    assert snapshot == {**old["snapshot"], "snapshot_version": SNAPSHOT_VERSION}
    assert [new["snapshot"][k] for k in added] == [{}, {}, None, {}]


def test_traced_history_keeps_its_trace_context_and_step_visits() -> None:
    """RunStarted.trace and trace_parent reach the state; a step entered twice records its second visit."""
    record = _load(GOLDEN / "traced_loop_with_approval.json")
    state = fold(_events(record))
    assert state is not None
    started = record["events"][0]["data"]
    assert state.trace == started["trace"]
    assert state.trace_parent == started["trace_parent"]
    entries = [e["seq"] for e in record["events"] if e["type"] == "ActivityScheduled"]
    assert state.steps["poll"].entered_seq == entries[1]  # the loop's second visit
    assert state.steps["ready"].entered_seq is None  # a choice is instant: never open


def test_shape_histories_keep_their_lanes_joins_and_compensations() -> None:
    """The recorded parallel and for-each runs replay to what they recorded: one join per shape step,
    branch outputs mapped by id, a for-each's outputs in item order (null for the failed line), and the
    branches compensated side by side (both scheduled before either reported)."""
    comp = _load(GOLDEN / "parallel_branches_compensated.json")
    types = [e["type"] for e in comp["events"]]
    assert types.count("JoinDecided") == 1
    assert types.count("StepJoined") == 1
    first_two = [e["data"]["step"] for e in comp["events"] if e["type"] == "CompensationScheduled"][:2]
    i = types.index("CompensationScheduled")
    assert types[i : i + 2] == ["CompensationScheduled", "CompensationScheduled"]
    assert set(first_two) == {"review.legal.file", "review.finance.reserve-budget"}
    lines = fold(_events(_load(GOLDEN / "for_each_with_concurrency.json")))
    assert lines is not None
    assert lines.steps["lines"].output == [None, {"box": "B1"}, {"box": "C1"}]
    quote = fold(_events(_load(GOLDEN / "parallel_any_with_cancel.json")))
    assert quote is not None
    assert quote.steps["quotes"].output == {"acme": None, "globex": {"price": 7}, "initech": None}
    assert quote.steps["quotes.initech.ask-initech"].status == "succeeded"  # reported first, recorded


def test_child_run_histories_keep_the_link_between_parent_and_child() -> None:
    """The parent records the child it asked for and its end; the child records its parent."""
    parent = fold(_events(_load(GOLDEN / "child_run_parent.json")))
    child = fold(_events(_load(GOLDEN / "child_run_child.json")))
    assert parent is not None
    assert child is not None
    assert parent.steps["kyc"].output == {"score": 97}
    assert parent.children == {}
    assert child.parent == {"run_id": "golden-0", "step": "kyc", "depth": 1}


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_recorded_hash_chain_still_verifies(path: Path) -> None:
    """The chain head computed today over the recorded events equals the recorded one."""
    record = _load(path)
    head = ""
    for e in _events(record):
        head = chain_hash(head, record["run_id"], e)
    assert head == record["chain_head"]


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_recorded_definition_keeps_its_digest(path: Path) -> None:
    """The recorded definition still parses and has the digest the run pinned when it started."""
    record = _load(path)
    started = record["events"][0]
    assert started["type"] == "RunStarted"
    d = parse_definition(record["definition"])
    assert d.digest == started["data"]["definition"]["digest"]
    assert [s.id for s in d.steps] == started["data"]["steps"]


def test_the_event_histories_say_what_they_mean() -> None:
    """The wait's name, key and expiry, the callback's hash (never a token) and the payload are in the
    events themselves: the histories replay alone to the step's output or its timeout."""
    got = fold(_events(_load(GOLDEN / "events_received_by_callback.json")))
    late = fold(_events(_load(GOLDEN / "events_wait_timed_out.json")))
    assert got is not None
    assert late is not None
    assert got.output == {"at": "2026-01-01T01:00:00Z"}
    assert got.event_waits == {}
    assert late.steps["delivered"].status == "failed"
    assert late.error is not None
    assert late.error["code"] == "NotDelivered"
