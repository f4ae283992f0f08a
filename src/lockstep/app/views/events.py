"""The read models of external events: a delivery's answer, a run's event waits with their
callbacks (never a token), a freshly minted callback (its token shown once), a callback's answer and
a tenant's integrations (never a secret)."""

from __future__ import annotations

from pydantic import Field

from .base import View

__all__ = [
    "CallbackAccepted",
    "CallbackView",
    "EventDelivery",
    "EventWaitView",
    "IntegrationSet",
    "IntegrationView",
    "MintedCallback",
    "RunEventWaits",
]


class EventDelivery(View):
    """What POST /v1/events did with an event: the runs it was delivered to (one command per run), or
    that it is buffered for the first run that starts waiting; a replay of its id gets this again."""

    event_id: str
    name: str
    key: str
    status: str = Field(description="delivered | buffered | consumed | expired")
    delivered_to: list[str] = Field(description="the runs that received it, each once")
    buffered_until: str | None = None
    replay: bool = Field(description="true: this id was sent before; this is the first answer")


class CallbackView(View):
    """A callback minted for a wait, as stored: its id, state and expiry (never its token)."""

    callback_id: str
    step: str
    generation: int
    status: str = Field(description="open | used | replaced | closed")
    expires_at: str


class EventWaitView(View):
    """One step of a run waiting for an external event."""

    step: str
    name: str
    key: str
    generation: int
    since: str
    expires_at: str
    callback: bool
    integration: str | None = None


class RunEventWaits(View):
    """A run's open event waits and every callback minted for it."""

    run_id: str
    waits: list[EventWaitView]
    callbacks: list[CallbackView]


class MintedCallback(View):
    """A fresh single-use callback URL for a waiting step: the token is shown this once; only its
    sha256 is stored."""

    url: str
    token: str
    callback_id: str
    run_id: str
    step: str
    expires_at: str
    signed_by: str | None = Field(default=None, description="the integration whose secret must sign the body")


class CallbackAccepted(View):
    """A callback's body was accepted: the step received it as its event."""

    run_id: str
    step: str
    callback_id: str
    status: str = "received"


class IntegrationView(View):
    """A tenant integration (never its secret)."""

    name: str
    created_at: str
    updated_at: str


class IntegrationSet(View):
    name: str
    tenant: str
    status: str = Field(description="created | replaced")
