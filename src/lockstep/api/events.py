"""/v1 external events: publishers send events (POST /v1/events), operators mint per-wait callback
URLs, partner systems call them back (POST /v1/callbacks/{token}: the token is the credential), and
anyone who may read a run sees its waits and callbacks (never a token)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from ..app.events import Callbacks, EventDeliveries
from ..app.principals import Principal
from ..app.views.events import CallbackAccepted, EventDelivery, MintedCallback, RunEventWaits
from ..core.canonical import JSONValue
from .deps import need, on_loop
from .problems import PROBLEM_RESPONSES, error_response

__all__ = ["router"]

router = APIRouter(prefix="/v1", responses=PROBLEM_RESPONSES, tags=["events"])
PUBLISH_ERRORS: dict[int | str, dict[str, Any]] = {
    403: error_response("The key is not a publisher's"),
    409: error_response("The id was used before for another event (`id_reused`)"),
    422: error_response(
        "The name, key, id or payload is invalid (`payload_invalid`: a waiting run's schema)"
    ),
    429: error_response("Too many events nobody waits for are kept already (max_buffered_events)"),
}
CALLBACK_ERRORS: dict[int | str, dict[str, Any]] = {
    401: error_response("The body is not signed by the wait's integration (Standard Webhooks)"),
    404: error_response("Unknown or malformed callback (the same answer either way)"),
    409: error_response("The callback was used already (single use)"),
    410: error_response("The callback expired, was replaced, or the run moved on"),
    422: error_response("The body is not JSON, or fails the step's schema (the callback stays usable)"),
}
WAITS_ERRORS: dict[int | str, dict[str, Any]] = {
    404: error_response("No such run in the caller's tenant"),
    410: error_response("The run was purged: the problem says when, by whom and why (its tombstone)"),
}
MINT_ERRORS: dict[int | str, dict[str, Any]] = {
    404: error_response("No such run in the caller's tenant"),
    409: error_response("The step does not wait for an event, takes no callback, or has had 5 minted"),
}


def _deliveries(request: Request) -> EventDeliveries:
    d: EventDeliveries = request.app.state.service.event_deliveries
    return d


def _callbacks(request: Request) -> Callbacks:
    c: Callbacks = request.app.state.callbacks
    return c


Deliveries = Annotated[EventDeliveries, Depends(on_loop(_deliveries))]
Cbs = Annotated[Callbacks, Depends(on_loop(_callbacks))]


class EventRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=64, description="the event's name, e.g. parcel-delivered")
    key: str = Field(max_length=256, description="the correlation key the waiting runs rendered")
    id: str = Field(
        max_length=200, description="your unique id of this event: a resend gets the first answer"
    )
    payload: JSONValue = Field(default=None, description="becomes the output of each receiving step")


class MintCallbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    step: str = Field(min_length=1, max_length=300, description="the waiting step's key")


@router.post(
    "/events",
    response_model=EventDelivery,
    responses=PUBLISH_ERRORS,
    summary="Send an external event (publisher key)",
)
def publish(
    body: EventRequest, d: Deliveries, p: Annotated[Principal, Depends(need("publish_events"))]
) -> EventDelivery:
    return d.publish(p, body.name, body.key, body.payload, body.id)


@router.post(
    "/runs/{run_id}/callbacks",
    response_model=MintedCallback,
    responses=MINT_ERRORS,
    status_code=201,
    summary="Mint a callback URL for a waiting step (the token is shown once)",
)
def mint(
    run_id: str, body: MintCallbackRequest, c: Cbs, p: Annotated[Principal, Depends(need("operate"))]
) -> MintedCallback:
    return c.mint(p, run_id, body.step)


@router.get(
    "/runs/{run_id}/event-waits",
    responses=WAITS_ERRORS,
    response_model=RunEventWaits,
    summary="The run's event waits and callbacks (never tokens)",
)
def waits(run_id: str, c: Cbs, p: Annotated[Principal, Depends(need("read"))]) -> RunEventWaits:
    return c.waits(p.tenant, run_id)


@router.post(
    "/callbacks/{token}",
    response_model=CallbackAccepted,
    responses=CALLBACK_ERRORS,
    summary="A partner's callback: the body is the event's payload (signed if the wait says so)",
)
async def callback(
    # Any length up to this: a malformed token gets the same 404 as an unknown one (no hint at the format).
    token: Annotated[str, Path(max_length=10_000)],
    request: Request,
    c: Cbs,
) -> CallbackAccepted:
    body = await request.body()
    headers = {k.lower(): v for k, v in request.headers.items()}
    return await run_in_threadpool(c.receive, token, body, headers)  # the database is blocking
