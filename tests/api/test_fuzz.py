"""A property-based fuzz of the API from its own OpenAPI document (schemathesis): whatever a client sends
to any documented operation, with a valid key holding every role, the answer is never a 5xx.

The database is seeded with definitions, runs in several states and leased tasks, and generated path ids
are sometimes swapped for real ones, so the fuzz reaches past the 404s into the real handlers."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.generation import GenerationMode
from schemathesis.schemas import APIOperation

from lockstep.api.app import create_app
from lockstep.engine import Engine

from .conftest import NAP, ORDER_DOC, order_input

SIGNOFF: dict[str, Any] = {
    "name": "signoff",
    "steps": [
        {
            "id": "sign",
            "approval": {"approvers": {"users": ["fuzzer"]}, "timeout": "1d", "allow_initiator": True},
        }
    ],
}
MAX_POLL_WAIT = 0.05  # the generated long-poll waits (up to 30 s) are capped to keep the fuzz fast


@dataclass
class Seeded:
    engine: Engine
    app: Any
    key: str
    run_ids: list[str]
    task_ids: list[str]
    definitions: list[tuple[str, int]]


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    path = tmp_path_factory.mktemp("fuzz") / "db.sqlite"
    engine = Engine.open(f"sqlite:///{path}")
    try:
        principals = engine.service.principals
        principals.create_tenant("acme")
        key = principals.create_user(
            "acme", "fuzzer", ["admin", "operator", "worker", "approver", "viewer"], []
        ).api_key
        principals.create_tenant("globex")
        svc = engine.service
        svc.publish("acme", ORDER_DOC)
        svc.publish("acme", NAP)
        svc.publish("acme", SIGNOFF)
        svc.publish("globex", NAP)
        runs = [svc.start("acme", "order-fulfilment", input=order_input(i)).run_id for i in range(4)]
        runs.append(svc.start("acme", "nap", input={}).run_id)
        runs.append(svc.start("globex", "nap", input={}).run_id)
        runs.append(svc.start("acme", "signoff", input={}).run_id)
        svc.cancel("acme", runs[3], "seeded")
        leases = svc.claim(
            "seed", ["inventory.reserve"], limit=2, lease_ttl=timedelta(hours=1), tenant="acme"
        )
        yield Seeded(
            engine,
            create_app(engine.service, ui=False),
            key,
            runs,
            [t.task_id for t in leases] + ["nope/reserve/a1"],
            [("order-fulfilment", 1), ("nap", 1)],
        )
    finally:
        engine.close()


def _document() -> dict[str, Any]:
    """The app's OpenAPI document (it does not depend on the database's contents)."""
    with tempfile.TemporaryDirectory() as d, Engine.open(f"sqlite:///{d}/doc.sqlite") as e:
        return create_app(e.service, ui=False).openapi()


DOCUMENT = _document()
schema = schemathesis.openapi.from_dict(DOCUMENT)


def test_fuzzed_document_is_the_one_the_app_serves(seeded: Seeded) -> None:
    """The document the fuzz is generated from is exactly what the app serves at /openapi.json."""
    served = schemathesis.openapi.from_asgi("/openapi.json", seeded.app).raw_schema
    assert served == DOCUMENT


def _aim(case: Any, seeded: Seeded, pick: int) -> None:
    """Point the generated case at seeded objects (every other example) and cap long-poll waits."""
    params = case.path_parameters or {}
    if pick % 2 == 0:
        if "run_id" in params:
            params["run_id"] = seeded.run_ids[pick // 2 % len(seeded.run_ids)]
        if "task_id" in params:
            params["task_id"] = seeded.task_ids[pick // 2 % len(seeded.task_ids)]
        if "step" in params:
            params["step"] = "sign"
        if "name" in params:
            params["name"], params["version"] = seeded.definitions[pick // 2 % len(seeded.definitions)]
    if case.path == "/v1/runs" and case.method == "POST" and isinstance(case.body, dict) and pick % 4 < 2:
        name, _version = seeded.definitions[pick % 2]
        case.body["definition"] = name
        if pick % 8 < 4:
            case.body.pop("version", None)
    if case.path == "/v1/tasks/poll" and isinstance(case.body, dict):
        wait = case.body.get("wait_seconds", 20.0)
        if isinstance(wait, int | float) and not isinstance(wait, bool):
            case.body["wait_seconds"] = min(wait, MAX_POLL_WAIT)
        elif "wait_seconds" not in case.body:
            case.body["wait_seconds"] = 0


def _check(case: Any, seeded: Seeded, pick: int) -> None:
    _aim(case, seeded, pick)
    response = case.call(app=seeded.app, headers={"Authorization": f"Bearer {seeded.key}"})
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:500]}\n"
        f"body={case.body!r} query={case.query!r} headers={case.headers!r}"
    )


FUZZ = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,  # the same examples on every run: a failure here is reproducible, never flaky
    database=None,
    suppress_health_check=list(HealthCheck),
)
PUBLISH = ("POST", "/v1/definitions")
# Every documented operation, fuzzed with schema-valid (positive) and schema-violating (negative) requests.
# Built from schemathesis's strategies directly: its pytest plugin is disabled (pyproject addopts).
OPERATIONS = [result.ok() for result in schema.get_all_operations()]


def _params(*, publish: bool) -> list[Any]:
    return [
        pytest.param(op, mode, id=f"{op.method.upper()} {op.path} {mode.value}")
        for op in OPERATIONS
        for mode in GenerationMode
        if ((op.method.upper(), op.path) == PUBLISH) == publish
    ]


def _fuzz(
    operation: APIOperation, mode: GenerationMode, data: st.DataObject, pick: int, seeded: Seeded
) -> None:
    case = data.draw(operation.as_strategy(mode), label="case")
    _check(case, seeded, pick)


def test_every_operation_is_fuzzed() -> None:
    """The fuzz covers every documented operation (publish on its own), in both generation modes."""
    assert len(OPERATIONS) == sum(len(methods) for methods in DOCUMENT["paths"].values())
    assert len(_params(publish=True)) == len(GenerationMode)
    assert len(_params(publish=False)) == (len(OPERATIONS) - 1) * len(GenerationMode)


@pytest.mark.parametrize(("operation", "mode"), _params(publish=False))
@given(data=st.data(), pick=st.integers(min_value=0, max_value=63))
@FUZZ
def test_no_request_makes_a_server_error(
    operation: APIOperation, mode: GenerationMode, data: st.DataObject, pick: int, seeded: Seeded
) -> None:
    """No generated request, valid or not, to real or made-up ids, gets a 5xx (all /v1 but publish)."""
    _fuzz(operation, mode, data, pick, seeded)


@pytest.mark.parametrize(("operation", "mode"), _params(publish=True))
@given(data=st.data(), pick=st.integers(min_value=0, max_value=63))
@FUZZ
def test_publish_never_makes_a_server_error(
    operation: APIOperation, mode: GenerationMode, data: st.DataObject, pick: int, seeded: Seeded
) -> None:
    """No generated definition body, YAML or JSON, gets a 5xx from POST /v1/definitions."""
    _fuzz(operation, mode, data, pick, seeded)
