"""/v1/schedules: create, change, pause, resume, delete and trigger schedules (permission `schedule`:
admins and operators), list and show them (`read`). Scoped to the caller's tenant: another tenant's
schedule answers 404. Every route is a plain function: FastAPI runs it in a worker thread (checking a
cron expression walks its next slots)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Path, Response
from pydantic import BaseModel, ConfigDict, Field

from ..app.principals import Principal
from ..app.views import StartResult
from ..app.views.schedules import ScheduleDeleted, ScheduleView
from ..core.canonical import JSONValue
from ..core.schedule import MAX_CRON_LENGTH, MAX_ZONE_LENGTH
from .deps import Svc, need
from .problems import PROBLEM_RESPONSES, error_response

__all__ = ["router"]

router = APIRouter(prefix="/v1/schedules", responses=PROBLEM_RESPONSES, tags=["schedules"])
Scheduler = Annotated[Principal, Depends(need("schedule"))]
Reader = Annotated[Principal, Depends(need("read"))]
Name = Annotated[str, Path(min_length=1, max_length=64)]
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: error_response("No such schedule in the caller's tenant")}
CHANGE: dict[int | str, dict[str, Any]] = {
    **NOT_FOUND,
    409: error_response("Refused as the schedule is (paused already, ...); nothing was changed"),
}


class ScheduleRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=64, description="Lowercase letters, digits, '.', '_', '-'")
    definition: str = Field(min_length=1, max_length=64)
    version: int | None = Field(default=None, ge=1, le=2**31, description="Pin a version; null: the latest")
    cron: str = Field(
        min_length=1,
        max_length=MAX_CRON_LENGTH,
        description="5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first",
    )
    timezone: str = Field(default="UTC", min_length=1, max_length=MAX_ZONE_LENGTH, description="IANA name")
    input: JSONValue = Field(default=None, description="The input of every run (checked against the schema)")
    overlap: Literal["skip", "allow", "cancel_previous"] = "skip"
    catch_up: Literal["none", "last", "all"] = "last"
    catch_up_limit: int | None = Field(default=None, ge=1, le=2**31, description="Slots `all` starts at most")


class ScheduleChange(BaseModel):
    """The fields to change; those left out stay as they are (`version: null` follows the latest)."""

    model_config = ConfigDict(extra="forbid")
    definition: str | None = Field(default=None, min_length=1, max_length=64)
    version: int | None = Field(default=None, ge=1, le=2**31)
    cron: str | None = Field(default=None, min_length=1, max_length=MAX_CRON_LENGTH)
    timezone: str | None = Field(default=None, min_length=1, max_length=MAX_ZONE_LENGTH)
    input: JSONValue = None
    overlap: Literal["skip", "allow", "cancel_previous"] | None = None
    catch_up: Literal["none", "last", "all"] | None = None
    catch_up_limit: int | None = Field(default=None, ge=1, le=2**31)


class PauseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str | None = Field(default=None, max_length=2000, description="Why; shown with the schedule")


@router.post("", response_model=ScheduleView, status_code=201, summary="Create a schedule")
def create(body: ScheduleRequest, svc: Svc, p: Scheduler) -> ScheduleView:
    return svc.schedules.create(
        p.tenant,
        body.name,
        definition=body.definition,
        version=body.version,
        cron=body.cron,
        timezone=body.timezone,
        input=body.input,
        overlap=body.overlap,
        catch_up=body.catch_up,
        catch_up_limit=body.catch_up_limit,
        actor=p.name,
    )


@router.get("", response_model=list[ScheduleView], summary="The tenant's schedules, with next fire times")
def list_schedules(svc: Svc, p: Reader) -> list[ScheduleView]:
    return svc.schedules.list(p.tenant)


@router.get(
    "/{name}",
    response_model=ScheduleView,
    responses=NOT_FOUND,
    summary="A schedule: next fire times, the last slot and its run, why slots were skipped or missed",
)
def show(name: Name, svc: Svc, p: Reader) -> ScheduleView:
    return svc.schedules.show(p.tenant, name)


@router.patch("/{name}", response_model=ScheduleView, responses=CHANGE, summary="Change a schedule")
def update(name: Name, body: ScheduleChange, svc: Svc, p: Scheduler) -> ScheduleView:
    given = body.model_fields_set
    changes: dict[str, Any] = {k: getattr(body, k) for k in given}
    return svc.schedules.update(p.tenant, name, actor=p.name, **changes)


@router.post("/{name}/pause", response_model=ScheduleView, responses=CHANGE, summary="Stop firing")
def pause(name: Name, body: PauseRequest, svc: Svc, p: Scheduler) -> ScheduleView:
    return svc.schedules.pause(p.tenant, name, reason=body.reason, actor=p.name)


@router.post(
    "/{name}/resume", response_model=ScheduleView, responses=CHANGE, summary="Fire again, from the next slot"
)
def resume(name: Name, svc: Svc, p: Scheduler) -> ScheduleView:
    return svc.schedules.resume(p.tenant, name, actor=p.name)


@router.delete(
    "/{name}",
    response_model=ScheduleDeleted,
    responses=NOT_FOUND,
    summary="Delete a schedule (the runs it started are kept)",
)
def delete(name: Name, svc: Svc, p: Scheduler) -> ScheduleDeleted:
    return svc.schedules.delete(p.tenant, name, actor=p.name)


@router.post(
    "/{name}/trigger",
    response_model=StartResult,
    status_code=201,
    responses={
        **NOT_FOUND,
        200: {"model": StartResult, "description": "Same Idempotency-Key: the run it started"},
    },
    summary="Start one run now (start key `<name>:trigger:<Idempotency-Key>`)",
)
def trigger(
    name: Name,
    response: Response,
    svc: Svc,
    p: Scheduler,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> StartResult:
    out = svc.schedules.trigger(p.tenant, name, key=idempotency_key or None, actor=p.name)
    if not out.created:
        response.status_code = 200
    return out
