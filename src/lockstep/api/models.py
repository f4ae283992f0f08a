"""Request and response models: they are what the OpenAPI document at /openapi.json describes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CancelRequest",
    "CancelResult",
    "CompleteRequest",
    "DefinitionVersion",
    "EventView",
    "FailRequest",
    "HeartbeatRequest",
    "HeartbeatResult",
    "PollRequest",
    "PollResult",
    "PublishResult",
    "ReportResult",
    "RunList",
    "RunView",
    "StartRequest",
    "StartResult",
    "TaskView",
]

MAX_INT = 2**53


class DefinitionVersion(BaseModel):
    name: str
    version: int
    digest: str
    created_at: str | None = None


class PublishResult(BaseModel):
    name: str
    version: int
    digest: str
    created: bool = Field(description="False when identical content was already published as this version")


class StartRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    definition: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9-]+$")
    version: int | None = Field(default=None, ge=1, le=MAX_INT)
    input: Any = Field(default=None, description="The run input (checked against the input_schema)")


class StartResult(BaseModel):
    run_id: str
    created: bool


class DefinitionRef(BaseModel):
    name: str
    version: int
    digest: str


class StepView(BaseModel):
    model_config = ConfigDict(extra="allow")
    status: str
    attempts: int
    output: Any = None
    error: dict[str, Any] | None = None
    idempotency_key: str | None = Field(
        default=None, description="the key of the step's last attempt, as sent to the activity"
    )
    started_at: str | None = None
    finished_at: str | None = None


class RunView(BaseModel):
    """Exactly what `lockstep show RUN --json` prints."""

    model_config = ConfigDict(extra="allow")
    run_id: str
    tenant: str
    status: str
    definition: DefinitionRef
    current_step: str | None
    wait_kind: str | None = Field(
        description="queued, running, timer, retry, attention, cancelling, compensating"
    )
    wait_reason: str | None
    waiting_since: str | None
    waiting_until: str | None
    next_action: str | None
    input: Any
    output: Any
    error: dict[str, Any] | None
    steps: dict[str, StepView]
    started_at: str
    updated_at: str
    finished_at: str | None


class RunList(BaseModel):
    items: list[RunView]
    next_cursor: str | None = Field(description="Pass as `cursor` to get the next (older) page")


class EventView(BaseModel):
    seq: int
    type: str
    at: str
    step: str | None = None
    attempt: int | None = None
    data: dict[str, Any]


class CancelRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(min_length=1, max_length=2000, description="Why; recorded in the audit trail")


class CancelResult(BaseModel):
    run_id: str
    status: str
    accepted: bool = Field(description="False when the run was already cancelling (nothing new recorded)")


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


class TaskView(BaseModel):
    task_id: str
    run_id: str
    step: str
    attempt: int
    kind: Literal["action", "compensation"]
    activity: str
    input: Any
    idempotency_key: str
    definition: str
    version: int
    delivery: str
    fencing_token: int
    deadline: str


class PollResult(BaseModel):
    tasks: list[TaskView]


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
    output: Any = None


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
