"""The enums of the OpenAPI document are the core's values: step statuses (every status a recorded history
reaches is listed), step kinds, event types and webhook event types."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from lockstep.app.views.runs import STEP_STATUSES
from lockstep.core.definition.model import STEP_KINDS
from lockstep.core.effects import WEBHOOK_EVENTS
from lockstep.core.events import EVENT_TYPES, Event
from lockstep.core.evolve import fold
from lockstep.engine import Engine

from .conftest import Api
from .test_openapi_responses import DOCUMENT

GOLDEN = sorted((Path(__file__).parents[1] / "core" / "golden").rglob("*.json"))
SCHEMAS = DOCUMENT["components"]["schemas"]


def test_there_are_golden_histories() -> None:
    """The fold below has histories to fold (the golden files of tests/core)."""
    assert len(GOLDEN) >= 14


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_every_step_status_a_history_reaches_is_in_the_enum(path: Path) -> None:
    """Folding a recorded history event by event, every step's status is one the schema lists."""
    events = [Event.from_json(e) for e in json.loads(path.read_text(encoding="utf-8"))["events"]]
    for n in range(1, len(events) + 1):
        state = fold(events[:n])
        for key, step in state.steps.items():
            assert step.status in STEP_STATUSES, f"{path.name} after {n} events: {key} is {step.status}"


def test_step_status_and_kind_enums_are_the_cores() -> None:
    """StepView.status lists STEP_STATUSES; StepView.kind the core's step kinds (or null)."""
    step = SCHEMAS["StepView"]["properties"]
    assert step["status"]["enum"] == list(STEP_STATUSES)
    assert {"type": "string", "enum": list(STEP_KINDS)} in step["kind"]["anyOf"]


def test_event_types_are_the_cores() -> None:
    """EventView.type lists exactly the core's event types."""
    assert set(SCHEMAS["EventView"]["properties"]["type"]["enum"]) == EVENT_TYPES


def test_webhook_events_and_delivery_statuses_are_enums() -> None:
    """A subscription's events are the webhook event types; a delivery's status one of three."""
    for name in ("Subscription", "SubscribeRequest"):
        assert SCHEMAS[name]["properties"]["events"]["items"]["enum"] == list(WEBHOOK_EVENTS)
    assert SCHEMAS["Delivery"]["properties"]["status"]["enum"] == ["pending", "delivered", "failed"]


def test_events_are_a_page_with_a_cursor() -> None:
    """GET /v1/runs/{run_id}/events answers an EventPage and takes after_seq and limit."""
    op = DOCUMENT["paths"]["/v1/runs/{run_id}/events"]["get"]
    body = op["responses"]["200"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/EventPage"}
    assert {"after_seq", "limit"} <= {p["name"] for p in op["parameters"]}
    assert set(SCHEMAS["EventPage"]["properties"]) == {"items", "next_cursor"}


SHAPES: dict[str, Any] = {
    "name": "shapes",
    "steps": [
        {
            "id": "fan",
            "parallel": {
                "branches": {
                    "a": [{"id": "one", "activity": "x.one", "timeout": "1m"}],
                    "b": [{"id": "two", "activity": "x.one", "timeout": "1m"}],
                }
            },
        },
        {
            "id": "each",
            "for_each": {
                "items": "${input.lines}",
                "body": [{"id": "pack", "activity": "x.pack", "timeout": "1m"}],
            },
        },
        {"id": "parcel", "wait_event": {"name": "parcel-delivered", "key": "${input.key}", "timeout": "1d"}},
        {"id": "kid", "run": {"definition": "kid", "input": {}}},
    ],
}
KID: dict[str, Any] = {"name": "kid", "steps": [{"id": "nap", "wait": "1h"}]}


def _validator() -> Any:
    def check(value: Any, name: str) -> None:
        schema = {"$ref": f"#/components/schemas/{name}", "components": DOCUMENT["components"]}
        jsonschema.Draft202012Validator(schema).validate(value)

    return check


@pytest.mark.anyio
async def test_a_run_of_every_shape_is_what_the_schema_says(api: Api, engine: Engine) -> None:
    """A run at a parallel step, then in a for-each, a wait_event and a child run: each GET of the run (and
    of its child, with its parent) validates against RunView and names no field the schema lacks."""
    from .test_conformance import undocumented

    check = _validator()
    assert (await api.publish(KID)).status_code == 201
    assert (await api.publish(SHAPES)).status_code == 201
    run_id = await api.start_ok("shapes", {"lines": [1, 2], "key": "k-1"})
    seen: list[str] = []
    for _ in range(12):
        run = await api.run(run_id)
        check(run, "RunView")
        assert undocumented(run, {"$ref": "#/components/schemas/RunView"}) == [], run
        seen += [k for k in ("lanes", "event_waits", "children") if k in run]
        for task in await api.poll("x.one", "x.pack"):
            assert (await api.report(task)).status_code == 200
        if run["wait_kind"] == "event":
            body = {"name": "parcel-delivered", "key": "k-1", "id": "e1", "payload": {"at": "now"}}
            r = await api.c.post("/v1/events", json=body, headers=api.t.auth("publisher"))
            assert r.status_code == 200, r.text
        if run["wait_kind"] == "child":
            engine.service.run_children()  # the scheduler's pass that starts the child
            child = await api.run(run["children"]["kid"]["child_run_id"])
            check(child, "RunView")
            assert "parent" in child
            assert undocumented(child, {"$ref": "#/components/schemas/RunView"}) == [], child
            break
    assert {"lanes", "event_waits", "children"} <= set(seen), seen
