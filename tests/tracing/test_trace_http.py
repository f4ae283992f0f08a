"""Trace context over HTTP: a caller's `traceparent` on POST /v1/runs puts the run in the caller's trace
(under the request's server span when requests are traced); an invalid one is ignored, never a 500; an
external worker receives its attempt's traceparent in the task and its own span nests under the
attempt; an approval link's token never reaches a span."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from anyio.from_thread import start_blocking_portal
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from tracekit import by_name, from_memory, in_memory

from lab.fleet.otlp import Received
from lockstep import Engine
from lockstep.api.app import create_app
from lockstep.app.tracing.sdk import Tracing

CALLER_TRACE = "11112222333344445555666677778888"
CALLER_SPAN = "aaaabbbbccccdddd"
CALLER = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
ONE_STEP = {"name": "one", "steps": [{"id": "work", "activity": "ext.work", "timeout": "30s"}]}


class Client:
    """Blocking calls into the ASGI app (no server, no sockets), on an anyio portal."""

    def __init__(self, app: Any, stack: ExitStack) -> None:
        self.portal = stack.enter_context(start_blocking_portal())
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
        stack.callback(self.portal.call, self.http.aclose)

    def get(self, url: str, **kw: Any) -> httpx.Response:
        return self.portal.call(functools.partial(self.http.get, url, **kw))

    def post(self, url: str, **kw: Any) -> httpx.Response:
        return self.portal.call(functools.partial(self.http.post, url, **kw))


@dataclass
class Api:
    client: Client
    engine: Engine
    exporter: InMemorySpanExporter | None
    headers: dict[str, str]
    worker_headers: dict[str, str]

    def spans(self) -> list[Received]:
        assert self.exporter is not None
        return from_memory(self.exporter.get_finished_spans())

    def start(self, traceparent: str | None = None) -> str:
        headers = {**self.headers, **({"traceparent": traceparent} if traceparent is not None else {})}
        r = self.client.post("/v1/runs", json={"definition": "one"}, headers=headers)
        assert r.status_code == 201, r.text
        return str(r.json()["run_id"])

    def work_one(self, worker_span: Any = None) -> dict[str, Any]:
        """Poll one task as an external worker and complete it (inside `worker_span`, if given)."""
        r = self.client.post(
            "/v1/tasks/poll",
            json={"activities": ["ext.work"], "wait_seconds": 5},
            headers=self.worker_headers,
        )
        (task,) = r.json()["tasks"]
        if worker_span is not None:
            worker_span(task)
        body = {"attempt": task["attempt"], "fencing_token": task["fencing_token"], "output": {"ok": True}}
        done = self.client.post(
            f"/v1/tasks/{task['task_id']}/complete", json=body, headers=self.worker_headers
        )
        assert done.status_code == 200, done.text
        return dict(task)


def open_api(db_url: str, traced: bool, stack: ExitStack) -> Api:
    tracing: Tracing | None
    exporter: InMemorySpanExporter | None
    tracing, exporter = in_memory() if traced else (None, None)
    engine = Engine.open(db_url, tracing=tracing if tracing is not None else False)
    p = engine.service.principals
    p.create_tenant("acme")
    ops = p.create_user("acme", "ops", ["admin"], []).api_key
    bot = p.create_user("acme", "bot", ["worker"], []).api_key
    engine.publish(ONE_STEP, tenant="acme")
    stack.callback(engine.close)
    client = Client(create_app(engine.service), stack)
    auth = {"Authorization": f"Bearer {ops}"}
    return Api(client, engine, exporter, auth, {"Authorization": f"Bearer {bot}"})


@pytest.fixture
def traced(db_url: str) -> Iterator[Api]:
    with ExitStack() as stack:
        yield open_api(db_url, True, stack)


@pytest.fixture
def untraced(db_url: str) -> Iterator[Api]:
    with ExitStack() as stack:
        yield open_api(db_url, False, stack)


def started_trace(api: Api, run_id: str) -> tuple[str | None, str | None]:
    with api.engine.service.read() as tx:
        first = tx.events(run_id)[0][0].data_json()
    return first.get("trace"), first.get("trace_parent")


def test_a_callers_traceparent_makes_the_run_a_child_of_the_request_span(traced: Api) -> None:
    """The run's root span is a child of the POST's server span, itself a child of the caller's span."""
    run_id = traced.start(CALLER)
    traced.work_one()
    spans = traced.spans()
    (root,) = by_name(spans, "run one")
    posts = [s for s in spans if s.attributes.get("http.route") == "/v1/runs" and s.parent_id == CALLER_SPAN]
    assert len(posts) == 1
    assert root.trace_id == posts[0].trace_id == CALLER_TRACE
    assert root.parent_id == posts[0].span_id
    assert root.attributes["lockstep.run_id"] == run_id


def test_without_request_tracing_the_run_joins_the_callers_span_itself(untraced: Api) -> None:
    """A server that does not trace still records the caller's trace with the run: any process that
    traces it later continues the caller's trace, under the caller's span."""
    run_id = untraced.start(CALLER)
    trace, parent = started_trace(untraced, run_id)
    assert trace is not None
    assert trace.split("-")[1] == CALLER_TRACE
    assert parent == CALLER_SPAN


@pytest.mark.parametrize(
    "bad",
    [
        "garbage",
        "00-00000000000000000000000000000000-aaaabbbbccccdddd-01",  # an all-zero trace id
        "00-11112222333344445555666677778888-0000000000000000-01",  # an all-zero parent id
        "ff-11112222333344445555666677778888-aaaabbbbccccdddd-01",  # the forbidden version
        "00-11112222333344445555666677778888-AAAABBBBCCCCDDDD-01",  # upper case
        "00-11112222333344445555666677778888-aaaabbbbccccdddd-01-extra",  # extra fields in version 00
        "00-" + "1" * 5000,
    ],
)
def test_an_invalid_traceparent_is_ignored_and_the_run_starts_a_new_trace(untraced: Api, bad: str) -> None:
    """Never a 500 nor a refusal: the W3C rule, the header is ignored and the run is in no caller's trace."""
    run_id = untraced.start(bad)
    assert started_trace(untraced, run_id) == (None, None)


def test_an_invalid_traceparent_on_a_traced_server_gives_the_run_a_new_trace(traced: Api) -> None:
    """With request tracing, the request starts a new trace and the run is in it, under the request."""
    traced.start("00-not-a-trace-01")
    traced.work_one()
    spans = traced.spans()
    (root,) = by_name(spans, "run one")
    (post,) = [s for s in spans if s.span_id == root.parent_id]
    assert post.parent_id is None
    assert post.trace_id != CALLER_TRACE


def test_an_external_worker_gets_the_attempts_context_and_its_span_nests_under_it(traced: Api) -> None:
    """The task's `traceparent` is the attempt span's: a span the worker starts from it is the attempt
    span's child, in the run's trace (its own SDK, another provider: as in another process)."""
    worker_exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(worker_exporter))
    tracer = provider.get_tracer("external-worker")

    def do_work(task: dict[str, Any]) -> None:
        parent = TraceContextTextMapPropagator().extract({"traceparent": task["traceparent"]})
        with tracer.start_as_current_span("external work", context=parent):
            pass

    run_id = traced.start(CALLER)
    task = traced.work_one(do_work)
    (mine,) = from_memory(worker_exporter.get_finished_spans())
    spans = traced.spans()
    (attempt,) = by_name(spans, "attempt ext.work")
    assert mine.parent_id == attempt.span_id
    assert mine.trace_id == attempt.trace_id == CALLER_TRACE
    assert task["traceparent"] == f"00-{CALLER_TRACE}-{attempt.span_id}-01"
    assert attempt.attributes["lockstep.worker"] == "bot"
    assert attempt.attributes["lockstep.run_id"] == run_id


def test_the_openapi_document_describes_the_tasks_traceparent_and_the_header(traced: Api) -> None:
    doc = traced.client.get("/openapi.json").json()
    task = doc["components"]["schemas"]["TaskView"]
    assert "traceparent" in task["required"]
    assert "traceparent" in task["properties"]
    params = doc["paths"]["/v1/runs"]["post"]["parameters"]
    assert any(p["name"] == "traceparent" and p["in"] == "header" for p in params)


def test_an_approval_links_token_never_reaches_a_span(traced: Api) -> None:
    """/approve/<token> is traced with its route, never its path: the token is a credential."""
    token = "LINKTOKEN-ECHIDNA-4242"  # noqa: S105 - a made-up token, refused as unknown
    traced.client.get(f"/approve/{token}")
    spans = traced.spans()
    assert any(s.attributes.get("url.path") == "/approve/{token}" for s in spans)
    for s in spans:
        assert token not in s.name
        assert all(token not in str(v) for v in s.attributes.values())
