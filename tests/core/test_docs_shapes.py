"""docs/definitions.md stays true for the shape steps: its parallel, for_each, run (and wait_event)
examples publish as they are written (wrapped in a definition), with the names and outputs the text
describes."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from corekit import load
from shapekit import LaneRun

from lockstep.core.commands import ChildEnded, DeliverEvent

DOC = Path(__file__).parents[2] / "docs" / "definitions.md"


def _example(section: str) -> str:
    text = DOC.read_text().split(f"\n### {section}\n", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block is not None, section
    return block.group(1)


def test_the_parallel_example_runs_as_documented() -> None:
    """Both branches start; the approval and the budget run side by side; ship gets both outputs."""
    d = load(yaml.safe_dump({"name": "doc-parallel", "steps": yaml.safe_load(_example("parallel"))}))
    r = LaneRun(d, {"contract": "C-1", "amount": 10})
    assert r.open_steps() == ["review.finance.budget"]  # legal waits for alice meanwhile
    r.ok("review.finance.budget", {"reserved": 10})
    r.decide_as("review.legal.legal-ok", "alice")
    r.ok("review.legal.file", {"filed": True})
    r.ok("ship", {"tracking": "T"})
    shipped = next(e.data for e in r.events if e.type == "ActivityScheduled" and e.data.step == "ship")
    assert shipped.input == {"review": {"legal": {"filed": True}, "finance": {"reserved": 10}}}


def test_the_for_each_example_runs_as_documented() -> None:
    """Each item's label reads that item's pack; the output is the labels in item order."""
    d = load(yaml.safe_dump({"name": "doc-for-each", "steps": yaml.safe_load(_example("for_each"))}))
    lines = [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}]
    r = LaneRun(d, {"lines": lines})
    r.ok("lines[0].pack", {"box": "B0"})
    r.ok("lines[1].pack", {"box": "B1"})
    r.ok("lines[1].label", "L1")
    r.ok("lines[0].label", "L0")
    labels = {e.data.step: e.data.input for e in r.events if e.type == "ActivityScheduled"}
    assert labels["lines[0].label"] == {"box": "B0"}
    assert labels["lines[1].pack"] == {"sku": "b", "qty": 2, "line": 1}
    r.ok("notify")
    notify = next(e.data for e in r.events if e.type == "ActivityScheduled" and e.data.step == "notify")
    assert notify.input == {"boxes": ["L0", "L1"]}


def test_the_run_example_runs_as_documented() -> None:
    """The run step asks for kyc-check (latest) with the rendered input; welcome reads its output."""
    d = load(yaml.safe_dump({"name": "doc-run", "steps": yaml.safe_load(_example("run"))}))
    r = LaneRun(d, {"customer": "c-1"})
    (asked,) = [e.data for e in r.events if e.type == "ChildRunRequested"]
    assert (asked.definition, asked.version, asked.input) == ("kyc-check", None, {"customer": "c-1"})
    r.send(ChildEnded(asked.child_run_id, "kyc", "completed", {"score": 88}))
    welcome = next(e.data for e in r.events if e.type == "ActivityScheduled" and e.data.step == "welcome")
    assert welcome.input == {"score": 88}


def test_the_wait_event_example_runs_as_documented() -> None:
    """The example publishes; the event's payload reaches the next step; no event in time goes to chase."""
    d = load(yaml.safe_dump({"name": "doc-wait-event", "steps": yaml.safe_load(_example("wait_event"))}))
    r = LaneRun(d, {"parcel": "P-1", "tracking_no": "ABC"})
    r.ok("book", {"booked": True})
    w = r.s.event_waits["delivered"]
    assert (w["name"], w["key"], w["integration"]) == ("parcel-delivered", "ABC", "carrier")
    r.send(
        DeliverEvent("delivered", w["generation"], "carrier-evt-81723", w["name"], w["key"], {"at": "10:00"})
    )
    notify = next(e.data for e in r.events if e.type == "ActivityScheduled" and e.data.step == "notify")
    assert notify.input == {"at": "10:00"}
    late = LaneRun(d, {"parcel": "P-2", "tracking_no": "XYZ"})
    late.ok("book")
    late.fire()
    assert late.s.status == "failed"
    assert late.s.error is not None
    assert late.s.error["code"] == "NotDelivered"
