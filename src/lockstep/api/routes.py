"""/v1 definitions and runs. Every query is scoped to the caller's tenant: another tenant's run is 404."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from ..app.documents import parse_json_document
from ..app.principals import Principal
from ..app.search import Filters
from ..app.service import Service
from ..app.tracing import request_parent
from ..app.views import (
    CancelResult,
    DeadLetter,
    DefinitionDocument,
    DefinitionVersion,
    PublishResult,
    RetryResult,
    RunView,
    StartResult,
    VerifyResult,
)
from ..core.explain import WAIT_KINDS
from ..core.state import STATUSES
from ..engine import check_definition_size, load_document
from ..errors import InvalidInput
from .deps import Svc, need
from .models import CancelRequest, EventPage, RunList, StartRequest
from .problems import PROBLEM_RESPONSES, error_response

__all__ = ["router"]

router = APIRouter(prefix="/v1", responses=PROBLEM_RESPONSES)
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: error_response("No such run in the caller's tenant"),
    410: error_response("The run was purged: the problem says when, by whom and why (its tombstone)"),
}
REVEALING: dict[int | str, dict[str, Any]] = {
    **NOT_FOUND,
    403: error_response("reveal=true without the read_sensitive grant (audited)"),
}
MAX_EVENT_PAGE = 1000


def _enum(values: tuple[str, ...]) -> dict[str, Any]:
    """An optional query parameter's schema: one of `values` (the handler still says which, if not)."""
    return {"anyOf": [{"type": "string", "enum": list(values)}, {"type": "null"}]}


REVEAL = (
    "Show sensitive values instead of redaction markers: needs the caller's read_sensitive grant; "
    "every request is audited (403 without the grant)"
)


@router.post(
    "/definitions",
    response_model=PublishResult,
    status_code=201,
    responses={200: {"model": PublishResult, "description": "Identical content: the existing version"}},
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/yaml": {"schema": {"type": "string"}},
                "application/json": {"schema": {"type": "object"}},
            },
        }
    },
    summary="Publish a definition (YAML or JSON body)",
)
async def publish(
    request: Request, response: Response, svc: Svc, p: Annotated[Principal, Depends(need("publish"))]
) -> PublishResult:
    body = await request.body()
    content_type = request.headers.get("content-type", "").split(";")[0].strip()
    # Parsing and validating a document is CPU work and writing it is a transaction: both in a worker
    # thread, so a large or hostile document never holds the event loop (and every other request).
    out = await run_in_threadpool(_publish, svc, p.tenant, body, content_type)
    if not out.created:
        response.status_code = 200
    return out


def _publish(svc: Service, tenant: str, body: bytes, content_type: str) -> PublishResult:
    check_definition_size(len(body), "the definition", svc.server_limits)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("the definition must be UTF-8 text (YAML or JSON)") from None
    if not text.strip():
        raise InvalidInput("empty body: send the definition as YAML or JSON")
    if content_type == "application/json":
        doc = parse_json_document(text)
        if not isinstance(doc, dict):
            raise InvalidInput("a definition must be a JSON object with name and steps")
    else:
        doc = load_document(text if "\n" in text else text + "\n", svc.server_limits)
    return svc.publish(tenant, doc)


@router.get("/definitions", response_model=list[DefinitionVersion], summary="List definitions and versions")
def list_definitions(svc: Svc, p: Annotated[Principal, Depends(need("read"))]) -> list[DefinitionVersion]:
    return svc.definitions(p.tenant)


@router.get(
    "/definitions/{name}/versions/{version}",
    response_model=DefinitionDocument,
    summary="One definition version's document",
    responses={404: error_response("No such definition version")},
)
def get_definition(
    name: str,
    version: Annotated[int, Path(ge=1, le=2**31)],
    svc: Svc,
    p: Annotated[Principal, Depends(need("read"))],
) -> DefinitionDocument:
    return svc.definition_document(p.tenant, name, version)


@router.post(
    "/runs",
    response_model=StartResult,
    status_code=201,
    responses={
        200: {"model": StartResult, "description": "Same Idempotency-Key: the existing run"},
        404: error_response("No such definition"),
        429: error_response("Over the tenant's run limits"),
    },
    summary="Start a run",
)
def start_run(
    body: StartRequest,
    response: Response,
    svc: Svc,
    p: Annotated[Principal, Depends(need("start"))],
    idempotency_key: Annotated[str | None, Header(max_length=255)] = None,
    traceparent: Annotated[
        str | None,
        Header(
            description="W3C trace context: the run's trace becomes part of the caller's (an invalid "
            "value is ignored and the run starts a new trace)"
        ),
    ] = None,
) -> StartResult:
    out = svc.start(
        p.tenant,
        body.definition,
        input=body.input,
        key=idempotency_key or None,
        version=body.version,
        actor=p.name,
        parent=request_parent(traceparent),
    )
    if not out.created:
        response.status_code = 200
    return out


# An input filter at its longest: 5 keys of 64 characters and their dots, ` = `, a quoted 200-character
# value, and some spaces (each part is bounded again by the search itself, with a message).
MAX_INPUT_FILTER = 600


def _search(description: str, example: str, max_length: int = 64) -> Any:
    """An optional text filter of the runs search: bounded, described, with an example."""
    return Query(max_length=max_length, description=description, examples=[example])


@router.get("/runs", response_model=RunList, summary="List and search runs, newest first")
def list_runs(
    svc: Svc,
    p: Annotated[Principal, Depends(need("read"))],
    status: Annotated[
        str | None, Query(description="Only runs of this status", json_schema_extra=_enum(STATUSES))
    ] = None,
    definition: Annotated[str | None, _search("Only runs of this definition", "order-fulfilment")] = None,
    waiting: Annotated[
        str | None, Query(description="Only runs waiting for this", json_schema_extra=_enum(WAIT_KINDS))
    ] = None,
    run: Annotated[
        str | None, _search("A run id or its beginning (lowercase hex, at most 32 characters)", "0193f2a4")
    ] = None,
    key: Annotated[
        str | None, _search("Only the run started with this start key (Idempotency-Key)", "order-42", 255)
    ] = None,
    version: Annotated[str | None, _search("Only runs of this definition version", "2", 10)] = None,
    started_from: Annotated[
        str | None,
        _search(
            "Only runs started at or after this time (ISO 8601; without an offset it is UTC)",
            "2026-01-31T09:30:00Z",
        ),
    ] = None,
    started_to: Annotated[
        str | None,
        _search("Only runs started before this time (ISO 8601; without an offset it is UTC)", "2026-02-01"),
    ] = None,
    input: Annotated[
        str | None,
        _search(
            "An input field equal to a value: `field = value`, the field's keys joined with `.` (at most "
            "5, each of letters, digits, `_` and `-`), the value bare or in double quotes (at most 200 "
            "characters; a number or boolean as JSON writes it). A sensitive (sealed) field never matches",
            'address.city = "Köln"',
            MAX_INPUT_FILTER,
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[
        str | None, Query(max_length=64, description="The next page: the last answer's `next_cursor`")
    ] = None,
) -> RunList:
    """The tenant's runs matching every filter given (the same search as the UI's runs list, with the
    same messages for a bad filter: 422), newest first, a page at a time."""
    f = Filters(
        status=status or "",
        definition=definition or "",
        waiting=waiting or "",
        run=run or "",
        key=key or "",
        version=version or "",
        since=started_from or "",
        until=started_to or "",
        input=input or "",
    )
    items, next_cursor = svc.find_runs(p.tenant, f, cursor or "", limit)
    return RunList(items=items, next_cursor=next_cursor)


@router.get(
    "/runs/{run_id}", response_model=RunView, responses=REVEALING, summary="A run (as `lockstep show`)"
)
def get_run(
    run_id: str,
    svc: Svc,
    p: Annotated[Principal, Depends(need("read"))],
    reveal: Annotated[bool, Query(description=REVEAL)] = False,
) -> RunView:
    return svc.reveal.run(p, run_id, channel="api") if reveal else svc.show(p.tenant, run_id)


@router.get(
    "/runs/{run_id}/events",
    response_model=EventPage,
    responses=REVEALING,
    summary="The run's event history, oldest first, a page at a time",
)
def get_events(
    run_id: str,
    svc: Svc,
    p: Annotated[Principal, Depends(need("read"))],
    after_seq: Annotated[
        int, Query(ge=0, le=2**31, description="The cursor: only events after this seq (`next_cursor`)")
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_EVENT_PAGE, description="Events per page at most")] = 1000,
    reveal: Annotated[bool, Query(description=REVEAL)] = False,
) -> EventPage:
    rows = svc.reveal.events(p, run_id, channel="api") if reveal else svc.events(p.tenant, run_id)
    after = [e for e in rows if e.seq > after_seq]
    items = after[:limit]
    return EventPage(items=items, next_cursor=items[-1].seq if len(after) > limit else None)


@router.post(
    "/runs/{run_id}/cancel",
    response_model=CancelResult,
    responses={**NOT_FOUND, 409: error_response("The run already finished")},
    summary="Cancel a run",
)
def cancel_run(
    run_id: str, body: CancelRequest, svc: Svc, p: Annotated[Principal, Depends(need("cancel"))]
) -> CancelResult:
    return svc.cancel(p.tenant, run_id, body.reason, actor=p.name)


class RetryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    step: str = Field(min_length=1, max_length=64)
    reason: str = Field(min_length=1, max_length=2000)
    new_key: bool = Field(default=False, description="Use a new idempotency key (explicit and audited)")


@router.post(
    "/runs/{run_id}/retry",
    response_model=RetryResult,
    responses={**NOT_FOUND, 409: error_response("The step does not wait for an operator")},
    summary="Run a step that waits for an operator (dead letter, unknown outcome) again",
)
def retry_step(
    run_id: str, body: RetryRequest, svc: Svc, p: Annotated[Principal, Depends(need("operate"))]
) -> RetryResult:
    return svc.retry(p.tenant, run_id, body.step, body.reason, actor=p.name, new_key=body.new_key)


@router.get(
    "/dead-letters",
    response_model=list[DeadLetter],
    summary="Runs whose task went to the dead-letter state, with the reason",
)
def dead_letters(svc: Svc, p: Annotated[Principal, Depends(need("read"))]) -> list[DeadLetter]:
    return svc.dead_letters(p.tenant)


@router.get(
    "/runs/{run_id}/verify",
    response_model=VerifyResult,
    responses=NOT_FOUND,
    summary="Replay the run's events and compare with its snapshot, sequence and hash chain",
)
def verify_run(run_id: str, svc: Svc, p: Annotated[Principal, Depends(need("read"))]) -> VerifyResult:
    return svc.verify(run_id, tenant=p.tenant)[0]
