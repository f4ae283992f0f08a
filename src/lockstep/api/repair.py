"""/v1/runs/{id}/... operator repair: pause, resume, skip, edit-input, resolve, migrate (role operator), and
the second operator's confirmation (or anyone's rejection) of a four-eyes proposal."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from ..app.principals import Principal
from ..app.views import MigrationPlan, RepairResult
from ..core.canonical import JSONValue
from .deps import Svc, need
from .problems import PROBLEM_RESPONSES, error_response

__all__ = ["router"]

router = APIRouter(prefix="/v1/runs", responses=PROBLEM_RESPONSES, tags=["repair"])
Operator = Annotated[Principal, Depends(need("operate"))]
ERRORS: dict[int | str, dict[str, Any]] = {
    404: error_response("No such run in the caller's tenant"),
    409: error_response("The state machine refused the command (the detail says why); nothing was recorded"),
}


class Reason(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(
        min_length=1, max_length=2000, description="Recorded with the actor in the run's history"
    )


class SkipRequest(Reason):
    step: str = Field(min_length=1, max_length=64)
    output: JSONValue = Field(default=None, description="Stands in for the step's output")


class EditInputRequest(Reason):
    input: JSONValue


class ResolveRequest(Reason):
    step: str = Field(min_length=1, max_length=64)
    outcome: Literal["succeeded", "failed"] = Field(alias="as")
    output: JSONValue = None
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class MigrateRequest(Reason):
    to_version: int = Field(ge=1, le=2**31)
    map: dict[str, str] = Field(default_factory=dict, description="Renamed steps: old id -> new id")
    dry_run: bool = False


@router.post(
    "/{run_id}/pause",
    response_model=RepairResult,
    responses=ERRORS,
    summary="Pause: nothing new starts until resumed",
)
def pause(run_id: str, body: Reason, svc: Svc, p: Operator) -> RepairResult:
    return svc.repairs.pause(p.tenant, run_id, body.reason, actor=p.name)


@router.post(
    "/{run_id}/resume",
    response_model=RepairResult,
    responses=ERRORS,
    summary="Resume: held-back transitions happen now",
)
def resume(run_id: str, body: Reason, svc: Svc, p: Operator) -> RepairResult:
    return svc.repairs.resume(p.tenant, run_id, body.reason, actor=p.name)


@router.post(
    "/{run_id}/skip",
    response_model=RepairResult,
    responses=ERRORS,
    summary="Skip the current step where the definition allows it",
)
def skip(run_id: str, body: SkipRequest, svc: Svc, p: Operator) -> RepairResult:
    return svc.repairs.skip(
        p.tenant, run_id, body.step, body.reason, output=body.output, actor=p.name, roles=p.roles
    )


@router.post(
    "/{run_id}/edit-input",
    response_model=RepairResult,
    responses=ERRORS,
    summary="Replace the input for steps not yet started",
)
def edit_input(run_id: str, body: EditInputRequest, svc: Svc, p: Operator) -> RepairResult:
    return svc.repairs.edit_input(p.tenant, run_id, body.input, body.reason, actor=p.name)


@router.post(
    "/{run_id}/resolve",
    response_model=RepairResult,
    responses=ERRORS,
    summary="Settle a step whose outcome was unknown",
)
def resolve(run_id: str, body: ResolveRequest, svc: Svc, p: Operator) -> RepairResult:
    return svc.repairs.resolve(
        p.tenant, run_id, body.step, body.outcome, body.reason, output=body.output, actor=p.name
    )


@router.post(
    "/{run_id}/migrate",
    response_model=MigrationPlan,
    responses=ERRORS,
    summary="Move the run to another version (dry_run explains what would happen)",
)
def migrate(run_id: str, body: MigrateRequest, svc: Svc, p: Operator) -> MigrationPlan:
    return svc.repairs.migrate(
        p.tenant, run_id, body.to_version, body.reason, mapping=body.map, dry_run=body.dry_run, actor=p.name
    )


@router.post(
    "/{run_id}/proposals/{proposal_id}/confirm",
    response_model=RepairResult,
    responses=ERRORS,
    summary="Four-eyes: a second operator confirms a proposed skip, migrate or resolve (it runs now)",
)
def confirm(run_id: str, proposal_id: str, body: Reason, svc: Svc, p: Operator) -> RepairResult:
    return svc.repairs.confirm(p.tenant, run_id, proposal_id, body.reason, actor=p.name, roles=p.roles)


@router.post(
    "/{run_id}/proposals/{proposal_id}/reject",
    response_model=RepairResult,
    responses=ERRORS,
    summary="Four-eyes: reject a proposal (the proposer's own rejection withdraws it)",
)
def reject(run_id: str, proposal_id: str, body: Reason, svc: Svc, p: Operator) -> RepairResult:
    return svc.repairs.reject(p.tenant, run_id, proposal_id, body.reason, actor=p.name)
