"""Request models, and the envelopes of the responses: they are what the OpenAPI document at /openapi.json
describes. What a response carries is a read model of the application layer (app/views)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..app.views import EventView, RunView, TaskView
from ..core.canonical import JSONValue

__all__ = [
    "CancelRequest",
    "CompleteRequest",
    "EventPage",
    "FailRequest",
    "HeartbeatRequest",
    "HeartbeatResult",
    "PollRequest",
    "PollResult",
    "ReportResult",
    "RunList",
    "StartRequest",
]

MAX_INT = 2**53


class StartRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    definition: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9-]+$")
    version: int | None = Field(default=None, ge=1, le=MAX_INT)
    input: JSONValue = Field(default=None, description="The run input (checked against the input_schema)")


class RunList(BaseModel):
    items: list[RunView]
    next_cursor: str | None = Field(description="Pass as `cursor` to get the next (older) page")


class EventPage(BaseModel):
    """A page of a run's history, oldest first."""

    items: list[EventView]
    next_cursor: int | None = Field(
        description="Pass as `after_seq` to get the next page; null on the last page (the run's history "
        "so far: a live run may add events later, so poll again with the last `seq` you saw)"
    )


class CancelRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(min_length=1, max_length=2000, description="Why; recorded in the audit trail")


class PollRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    activities: list[str] = Field(min_length=1, max_length=100)
    queue: str | None = Field(default=None, max_length=64)
    max_tasks: int = Field(default=1, ge=1, le=100)
    wait_seconds: float = Field(default=20.0, ge=0, le=30)
    lease_seconds: float = Field(default=30.0, ge=1, le=3600)
    worker_id: str | None = Field(default=None, max_length=200)
    versions: list[str] | None = Field(
        default=None, max_length=100, description='Only tasks of these definition versions, e.g. ["orders:2"]'
    )


class PollResult(BaseModel):
    tasks: list[TaskView]


class AbandonRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    worker_id: str = Field(
        min_length=1,
        max_length=200,
        description="The id the worker polls with (`worker_id`): its leases are those of `USER/ID`",
    )


class AbandonResult(BaseModel):
    abandoned: int = Field(description="Leases of this worker id that were given up (retried at once)")


class HeartbeatRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    fencing_token: int = Field(ge=0, le=MAX_INT)
    lease_seconds: float = Field(default=30.0, ge=1, le=3600)


class HeartbeatResult(BaseModel):
    ok: bool


class CompleteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    attempt: int = Field(ge=1, le=MAX_INT)
    fencing_token: int = Field(ge=0, le=MAX_INT)
    output: JSONValue = None


class ErrorInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: str = Field(min_length=1, max_length=200)
    message: str = Field(default="", max_length=10_000)


class FailRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    attempt: int = Field(ge=1, le=MAX_INT)
    fencing_token: int = Field(ge=0, le=MAX_INT)
    error: ErrorInfo
    retryable: bool = True


class ReportResult(BaseModel):
    outcome: Literal["accepted"]
