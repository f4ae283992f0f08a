"""/v1 run webhooks: tenant admins subscribe URLs to run events, read each subscription's delivery log
and replay a delivery (app/webhooks.py; docs/webhooks.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from ..app.principals import Principal
from ..app.webhooks import Webhooks
from ..core.effects import WEBHOOK_EVENTS
from ..store import SubscriptionRow
from .deps import need, on_loop
from .problems import PROBLEM_RESPONSES, error_response

__all__ = ["router"]

router = APIRouter(prefix="/v1", responses=PROBLEM_RESPONSES, tags=["webhooks"])
ERRORS: dict[int | str, dict[str, Any]] = {
    403: error_response("The caller is not a tenant admin"),
    404: error_response("No such subscription or delivery in the caller's tenant"),
}


def _hooks(request: Request) -> Webhooks:
    w: Webhooks = request.app.state.service.webhooks
    return w


Hooks = Annotated[Webhooks, Depends(on_loop(_hooks))]
Admin = Annotated[Principal, Depends(need("webhooks"))]


class SubscribeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str = Field(min_length=1, max_length=2000, description="an https:// URL on a public address")
    events: list[str] = Field(
        min_length=1,
        max_length=10,
        description="event types, e.g. run.completed",
        json_schema_extra={"items": {"type": "string", "enum": list(WEBHOOK_EVENTS)}},
    )


class Subscription(BaseModel):
    id: str
    url: str
    events: list[str] = Field(json_schema_extra={"items": {"type": "string", "enum": list(WEBHOOK_EVENTS)}})
    enabled: bool
    created_by: str | None
    created_at: int = Field(description="milliseconds since the epoch")


class Created(Subscription):
    secret: str = Field(description="the whsec_ signing secret: shown here once, never again")


class Delivery(BaseModel):
    id: str = Field(description="the webhook-id header of every attempt")
    run_id: str
    seq: int
    event: str
    status: Literal["pending", "delivered", "failed"] = Field(
        description="failed: gave up (replay to try again)"
    )
    attempts: int
    last_status: int | None = Field(description="the receiver's HTTP status of the last attempt")
    last_error: str | None
    next_attempt_at: int | None = Field(description="ms since the epoch, while pending")
    created_at: int
    delivered_at: int | None


def _subscription(r: SubscriptionRow) -> dict[str, Any]:
    return {k: v for k, v in r.items() if k in Subscription.model_fields}


def _delivery(d: Any) -> Delivery:
    nxt = d["available_at"] if d["status"] == "pending" else None
    return Delivery(**{k: d[k] for k in Delivery.model_fields if k in d}, next_attempt_at=nxt)


@router.post(
    "/webhooks",
    response_model=Created,
    status_code=201,
    responses=ERRORS,
    summary="Subscribe a URL to run events",
)
def subscribe(body: SubscribeRequest, hooks: Hooks, p: Admin) -> Created:
    made = hooks.subscribe(p.tenant, body.url, body.events, p.name)
    (row,) = [r for r in hooks.subscriptions(p.tenant) if r["id"] == made.id]
    return Created(**_subscription(row), secret=made.secret)


@router.get(
    "/webhooks",
    response_model=list[Subscription],
    responses=ERRORS,
    summary="The tenant's subscriptions (never their secrets)",
)
def subscriptions(hooks: Hooks, p: Admin) -> list[Subscription]:
    return [Subscription(**_subscription(r)) for r in hooks.subscriptions(p.tenant)]


@router.get(
    "/webhooks/{sub_id}/deliveries",
    response_model=list[Delivery],
    responses=ERRORS,
    summary="The delivery log, newest first",
)
def deliveries(
    sub_id: str, hooks: Hooks, p: Admin, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> list[Delivery]:
    return [_delivery(d) for d in hooks.deliveries(p.tenant, sub_id, limit)]


@router.post(
    "/webhooks/{sub_id}/deliveries/{delivery_id}/replay",
    response_model=Delivery,
    responses=ERRORS,
    summary="Deliver again, with the same webhook-id",
)
def replay(sub_id: str, delivery_id: str, hooks: Hooks, p: Admin) -> Delivery:
    return _delivery(hooks.replay(p.tenant, sub_id, delivery_id, p.name))
