"""Each API call once, as data: the method, path, query, body and headers of the request and the type
its answer decodes to. `Client` and `AsyncClient` only send them, so the two cannot drift apart."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypedDict, TypeVar, cast
from urllib.parse import quote

import msgspec

from ..errors import InvalidInput
from .types import (
    CancelResult,
    DeadLetter,
    DecisionResult,
    Event,
    EventDelivery,
    InboxItem,
    Link,
    MigrationPlan,
    MigrationRequest,
    MintedLink,
    Reassigned,
    RepairResult,
    RetryResult,
    RevokedLink,
    Run,
    RunPage,
    StartResult,
    Task,
)

__all__ = ["Call", "EventsPage", "RunFilters", "none"]

T = TypeVar("T")


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    decode: Callable[[bytes], T]
    params: dict[str, Any] = field(default_factory=dict)
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


def _decoder(t: Any) -> Callable[[bytes], Any]:
    return msgspec.json.Decoder(t).decode


def none(_body: bytes) -> None:
    return None


class _Polled(msgspec.Struct, frozen=True):
    tasks: list[Task]


class EventsPage(msgspec.Struct, frozen=True, kw_only=True):
    """A page of a run's events (GET /v1/runs/{id}/events: EventPage)."""

    items: list[Event]


_RUN: Callable[[bytes], Run] = _decoder(Run)
_PAGE: Callable[[bytes], RunPage] = _decoder(RunPage)
_START: Callable[[bytes], StartResult] = _decoder(StartResult)
_CANCEL: Callable[[bytes], CancelResult] = _decoder(CancelResult)
_RETRY: Callable[[bytes], RetryResult] = _decoder(RetryResult)
_REPAIR: Callable[[bytes], RepairResult] = _decoder(RepairResult)
_EVENTS_PAGE: Callable[[bytes], EventsPage] = _decoder(EventsPage)
_INBOX: Callable[[bytes], list[InboxItem]] = _decoder(list[InboxItem])
_DELIVERY: Callable[[bytes], EventDelivery] = _decoder(EventDelivery)
_POLLED: Callable[[bytes], _Polled] = _decoder(_Polled)
_JSON: Callable[[bytes], Any] = _decoder(Any)
_PLAN: Callable[[bytes], MigrationPlan] = _decoder(MigrationPlan)
_REQUEST: Callable[[bytes], MigrationRequest] = _decoder(MigrationRequest)
_REQUESTS: Callable[[bytes], list[MigrationRequest]] = _decoder(list[MigrationRequest])
_DEAD: Callable[[bytes], list[DeadLetter]] = _decoder(list[DeadLetter])
_MINTED: Callable[[bytes], MintedLink] = _decoder(MintedLink)
_LINKS: Callable[[bytes], list[Link]] = _decoder(list[Link])
_REVOKED: Callable[[bytes], RevokedLink] = _decoder(RevokedLink)
_REASSIGNED: Callable[[bytes], Reassigned] = _decoder(Reassigned)


def _events(body: bytes) -> list[Event]:
    return _EVENTS_PAGE(body).items


def _decided(body: bytes) -> DecisionResult | MigrationRequest:
    """A decision's answer: the approval request's state, or (a `mig_` request) the migration request."""
    raw = _JSON(body)
    if isinstance(raw, dict) and "run_id" in raw:
        return msgspec.convert(raw, DecisionResult)
    return msgspec.convert(raw, MigrationRequest)


def _tasks(body: bytes) -> list[Task]:
    return _POLLED(body).tasks


def _id(value: str, what: str = "run id") -> str:
    """`value` as one path segment. The server decodes `%2F` before routing, so a `/` (or a dot
    segment) in an id would reach another route: refused here, before anything is sent."""
    if not value or "/" in value or value in (".", ".."):
        raise InvalidInput(f"{value!r} is not a {what}: it must be non-empty, without '/'")
    return quote(value, safe="")


def _path_id(value: str, what: str) -> str:
    """A task id (run/step/a1) or request id, which the routes take as a path: each segment quoted."""
    return "/".join(_id(part, what) for part in value.split("/"))


def _drop_none(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


# --- runs ------------------------------------------------------------------------------------------
def start(
    definition: str, input: Any, key: str | None, version: int | None, traceparent: str | None
) -> Call[StartResult]:
    headers = _drop_none({"Idempotency-Key": key, "traceparent": traceparent})
    body = _drop_none({"definition": definition, "version": version}) | {"input": input}
    return Call("POST", "/v1/runs", _START, body=body, headers=headers)


def get(run_id: str, reveal: bool) -> Call[Run]:
    return Call("GET", f"/v1/runs/{_id(run_id)}", _RUN, params={"reveal": "true"} if reveal else {})


class RunFilters(TypedDict, total=False):
    """The runs search of GET /v1/runs (and of the UI), by query name; an absent or None filter: any.

    `run` a run id or its beginning, `key` the start key, `started_from` (inclusive) and `started_to`
    (exclusive) ISO 8601 times or datetimes (naive: UTC), `input` an input field equal to a value
    (`customer = ACME`, `address.city = "Köln"`)."""

    status: str | None
    definition: str | None
    waiting: str | None
    run: str | None
    key: str | None
    version: int | None
    started_from: str | datetime | None
    started_to: str | datetime | None
    input: str | None


def page(filters: RunFilters, limit: int, cursor: str | None) -> Call[RunPage]:
    """GET /v1/runs: `filters` by their query names (None: any), a datetime as ISO 8601 (naive: UTC)."""
    unknown = sorted(set(filters) - set(RunFilters.__annotations__))
    if unknown:
        raise TypeError(
            f"unknown runs filter(s) {', '.join(unknown)}; known: {', '.join(RunFilters.__annotations__)}"
        )
    given = cast("dict[str, str | int | datetime | None]", filters)
    params: dict[str, Any] = {k: _when(v) for k, v in given.items() if v is not None}
    return Call("GET", "/v1/runs", _PAGE, params=_drop_none({**params, "limit": limit, "cursor": cursor}))


def _when(value: str | int | datetime) -> str | int:
    if not isinstance(value, datetime):
        return value
    return (value if value.tzinfo is not None else value.replace(tzinfo=UTC)).isoformat()


def events(run_id: str, after_seq: int, limit: int, reveal: bool) -> Call[list[Event]]:
    params: dict[str, Any] = {"after_seq": after_seq, "limit": limit}
    if reveal:
        params["reveal"] = "true"
    return Call("GET", f"/v1/runs/{_id(run_id)}/events", _events, params=params)


def cancel(run_id: str, reason: str) -> Call[CancelResult]:
    return Call("POST", f"/v1/runs/{_id(run_id)}/cancel", _CANCEL, body={"reason": reason})


# --- repair ----------------------------------------------------------------------------------------
def retry(run_id: str, step: str, reason: str, new_key: bool) -> Call[RetryResult]:
    body = {"step": step, "reason": reason, "new_key": new_key}
    return Call("POST", f"/v1/runs/{_id(run_id)}/retry", _RETRY, body=body)


def repair(run_id: str, command: str, body: dict[str, Any]) -> Call[RepairResult]:
    """pause, resume, skip, edit-input, resolve (one of the operator commands of /v1/runs/{id}/...)."""
    return Call("POST", f"/v1/runs/{_id(run_id)}/{command}", _REPAIR, body=body)


def migrate(
    run_id: str, to_version: int, reason: str, mapping: dict[str, str] | None, dry_run: bool
) -> Call[MigrationPlan]:
    body = {"to_version": to_version, "reason": reason, "map": mapping or {}, "dry_run": dry_run}
    return Call("POST", f"/v1/runs/{_id(run_id)}/migrate", _PLAN, body=body)


def proposal(run_id: str, proposal_id: str, verdict: str, reason: str) -> Call[RepairResult]:
    path = f"/v1/runs/{_id(run_id)}/proposals/{_id(proposal_id, 'proposal id')}/{verdict}"
    return Call("POST", path, _REPAIR, body={"reason": reason})


def dead_letters() -> Call[list[DeadLetter]]:
    return Call("GET", "/v1/dead-letters", _DEAD)


def migration_requests(status: str | None, limit: int) -> Call[list[MigrationRequest]]:
    return Call("GET", "/v1/migrations", _REQUESTS, params=_drop_none({"status": status, "limit": limit}))


def migration_request(request_id: str) -> Call[MigrationRequest]:
    return Call("GET", f"/v1/migrations/{_id(request_id, 'request id')}", _REQUEST)


# --- approvals and external events -----------------------------------------------------------------
def mint_link(run_id: str, step: str, approver: str, expires_in: str | None) -> Call[MintedLink]:
    body = _drop_none({"approver": approver, "expires_in": expires_in})
    path = f"/v1/runs/{_id(run_id)}/approvals/{_id(step, 'step')}/links"
    return Call("POST", path, _MINTED, body=body)


def links(run_id: str) -> Call[list[Link]]:
    return Call("GET", f"/v1/runs/{_id(run_id)}/approvals/links", _LINKS)


def revoke_link(link_id: str, reason: str) -> Call[RevokedLink]:
    path = f"/v1/approvals/links/{_id(link_id, 'link id')}/revoke"
    return Call("POST", path, _REVOKED, body={"reason": reason})


def reassign(run_id: str, step: str, old: str, new: str, reason: str) -> Call[Reassigned]:
    body = {"old": old, "new": new, "reason": reason}
    path = f"/v1/runs/{_id(run_id)}/approvals/{_id(step, 'step')}/reassign"
    return Call("POST", path, _REASSIGNED, body=body)


def inbox() -> Call[list[InboxItem]]:
    return Call("GET", "/v1/approvals/inbox", _INBOX)


def decide(
    request_id: str, decision: str, comment: str | None, values: dict[str, Any] | None
) -> Call[DecisionResult | MigrationRequest]:
    body = _drop_none({"decision": decision, "comment": comment, "values": values})
    # The route takes the id as a path (request ids may contain `/`): its segments are quoted one by one.
    return Call("POST", f"/v1/approvals/{_path_id(request_id, 'request id')}/decide", _decided, body=body)


def publish_event(name: str, key: str, event_id: str, payload: Any) -> Call[EventDelivery]:
    body = {"name": name, "key": key, "id": event_id, "payload": payload}
    return Call("POST", "/v1/events", _DELIVERY, body=body)


# --- the task API of workers -----------------------------------------------------------------------
def poll(
    activities: Sequence[str],
    max_tasks: int,
    wait_seconds: float,
    lease_seconds: float,
    worker_id: str | None,
    queue: str | None,
    versions: Sequence[str] | None,
) -> Call[list[Task]]:
    body = _drop_none(
        {
            "activities": list(activities),
            "max_tasks": max_tasks,
            "wait_seconds": wait_seconds,
            "lease_seconds": lease_seconds,
            "worker_id": worker_id,
            "queue": queue,
            "versions": list(versions) if versions is not None else None,
        }
    )
    return Call("POST", "/v1/tasks/poll", _tasks, body=body)


class _Abandoned(msgspec.Struct, frozen=True):
    abandoned: int


def abandon(worker_id: str) -> Call[int]:
    return Call(
        "POST",
        "/v1/tasks/abandon",
        lambda b: _decoder(_Abandoned)(b).abandoned,
        body={"worker_id": worker_id},
    )


def _task(task_id: str, what: str) -> str:
    # Task ids are run/step/a<n> (a step key may hold dots and brackets): the route takes a path.
    return f"/v1/tasks/{_path_id(task_id, 'task id')}/{what}"


def heartbeat(task_id: str, fencing_token: int, lease_seconds: float) -> Call[None]:
    body = {"fencing_token": fencing_token, "lease_seconds": lease_seconds}
    return Call("POST", _task(task_id, "heartbeat"), none, body=body)


def complete(task_id: str, attempt: int, fencing_token: int, output: Any) -> Call[None]:
    body = {"attempt": attempt, "fencing_token": fencing_token, "output": output}
    return Call("POST", _task(task_id, "complete"), none, body=body)


def fail(
    task_id: str, attempt: int, fencing_token: int, code: str, message: str, retryable: bool
) -> Call[None]:
    body = {
        "attempt": attempt,
        "fencing_token": fencing_token,
        "error": {"code": code, "message": message},
        "retryable": retryable,
    }
    return Call("POST", _task(task_id, "fail"), none, body=body)
