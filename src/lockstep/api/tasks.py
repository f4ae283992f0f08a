"""External workers over HTTP: long-poll for leased tasks, heartbeat, complete or fail with the fencing
token. A stale report gets 409 and is recorded in the run's history as ResultIgnored (audit evidence)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from ..app.principals import Principal
from ..app.views import TaskView
from ..errors import Conflict, Forbidden
from .deps import Svc, need
from .models import (
    AbandonRequest,
    AbandonResult,
    CompleteRequest,
    FailRequest,
    HeartbeatRequest,
    HeartbeatResult,
    PollRequest,
    PollResult,
    ReportResult,
)
from .problems import PROBLEM_RESPONSES, error_response

__all__ = ["router"]

router = APIRouter(prefix="/v1/tasks", responses=PROBLEM_RESPONSES, tags=["workers"])
Worker = Annotated[Principal, Depends(need("work"))]
STALE: dict[int | str, dict[str, Any]] = {
    404: error_response("No such task in the caller's tenant"),
    409: error_response("Stale attempt or fencing token (recorded as ResultIgnored), or lease lost"),
}


@router.post("/poll", response_model=PollResult, summary="Long-poll for tasks of the given activity types")
async def poll(body: PollRequest, svc: Svc, p: Worker, request: Request) -> PollResult:
    _no_builtins(body.activities)
    worker = _owner(p, body.worker_id)
    deadline = time.monotonic() + body.wait_seconds
    delay = 0.05
    while True:
        # A poller that went away (killed, timed out) must not be leased tasks nobody will run: they
        # would wait for their lease to expire.
        if await request.is_disconnected():
            return PollResult(tasks=[])
        leases = await run_in_threadpool(
            svc.claim,
            worker,
            body.activities,
            limit=body.max_tasks,
            lease_ttl=timedelta(seconds=body.lease_seconds),
            tenant=p.tenant,
            queue=body.queue or "default",
            versions=body.versions,
        )
        if leases or time.monotonic() >= deadline:
            break
        await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.5)
    return PollResult(tasks=[TaskView.of(t) for t in leases])


@router.post(
    "/abandon",
    response_model=AbandonResult,
    summary="Give up the leases a previous incarnation of this worker id held (call it at start-up)",
)
def abandon(body: AbandonRequest, svc: Svc, p: Worker) -> AbandonResult:
    """A worker restarted under the same `worker_id` (a supervisor slot, a pod ordinal) hands back the
    leases its dead predecessor held, so their attempts are retried now instead of at lease expiry.
    Only the caller's own leases in its own tenant: the owner is `USER/ID` of the caller's user."""
    return AbandonResult(abandoned=svc.abandon_leases(_owner(p, body.worker_id), p.tenant))


@router.post(
    "/{task_id:path}/heartbeat",
    response_model=HeartbeatResult,
    responses=STALE,
    summary="Extend the lease of a task you hold",
)
def heartbeat(task_id: str, body: HeartbeatRequest, svc: Svc, p: Worker) -> HeartbeatResult:
    _no_builtins([svc.task(task_id, p.tenant).activity])
    if not svc.heartbeat(task_id, body.fencing_token, timedelta(seconds=body.lease_seconds)):
        raise Conflict(
            f"the lease of task {task_id} with fencing token {body.fencing_token} is no longer held; "
            f"stop working on it",
            code="lease_lost",
        )
    return HeartbeatResult(ok=True)


@router.post(
    "/{task_id:path}/complete",
    response_model=ReportResult,
    responses=STALE,
    summary="Report success of an attempt",
)
def complete(task_id: str, body: CompleteRequest, svc: Svc, p: Worker) -> ReportResult:
    _no_builtins([svc.task(task_id, p.tenant).activity])
    verdict = svc.complete(
        task_id, body.attempt, body.fencing_token, body.output, tenant=p.tenant, strict=True
    )
    return _verdict(task_id, verdict)


@router.post(
    "/{task_id:path}/fail",
    response_model=ReportResult,
    responses=STALE,
    summary="Report failure of an attempt",
)
def fail(task_id: str, body: FailRequest, svc: Svc, p: Worker) -> ReportResult:
    _no_builtins([svc.task(task_id, p.tenant).activity])
    verdict = svc.fail(
        task_id,
        body.attempt,
        body.fencing_token,
        body.error.code,
        body.error.message,
        retryable=body.retryable,
        tenant=p.tenant,
    )
    return _verdict(task_id, verdict)


def _owner(p: Principal, worker_id: str | None) -> str:
    """The lease owner of a remote worker: its user's name and the id it gives (user names are the
    tenant's, so one user cannot take over another's leases by naming its id)."""
    return f"{p.name}/{worker_id}" if worker_id else p.name


def _no_builtins(activities: list[str]) -> None:
    """Built-in activities (`lockstep.http`) run only in lockstep's own database workers: their tasks
    use the tenant's secrets, which a remote worker must never hold, and no remote worker may report
    (or forge) their results."""
    builtin = sorted({a for a in activities if a.startswith("lockstep.")})
    if builtin:
        raise Forbidden(
            f"{', '.join(builtin)} is run by lockstep's own workers (`lockstep worker` on the database), "
            "never by a remote worker over HTTP: its tasks use the tenant's secrets",
            code="builtin_activity",
        )


def _verdict(task_id: str, verdict: str) -> ReportResult:
    if verdict == "ignored":
        raise Conflict(
            f"the result for task {task_id} is stale (superseded attempt, stale fencing token or finished "
            f"run); it changed nothing (the first few such reports are recorded as ResultIgnored)",
            code="stale_result",
        )
    return ReportResult(outcome="accepted")
