"""Running one attempt of an activity: the calling convention every worker shares (the database worker
and the remote worker over HTTP), so an activity behaves the same whichever kind of worker runs it.

An activity is `fn(input)` or `fn(input, ctx)`, sync or async. What it returns is its output; an
`ActivityError` fails the attempt with its code (retryable or not); any other exception fails it as
unexpected. The fail points a fault-injection run uses (`worker.before_call`, `worker.after_call`,
`worker.deliver_twice`, `unsafe.key_per_attempt`) are passed here, so they land at the same moment in
both kinds of worker.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

from ..app import failpoints
from ..core.canonical import JSONValue
from .activity import ActivityContext, ActivityError, LeaseLost, Registry

__all__ = ["Attempt", "Outcome", "call_activity", "execute"]

T = TypeVar("T")
# What running an activity came to: its output, or (code, message, retryable, unexpected).
Outcome = tuple[Literal["ok"], JSONValue] | tuple[Literal["fail"], tuple[str, str, bool, bool]]


@dataclass(frozen=True)
class Attempt:
    """What an activity is called with: a leased task, whichever way it was leased."""

    task_id: str
    tenant: str
    run_id: str
    step: str
    attempt: int
    kind: str
    activity: str
    input: JSONValue
    idempotency_key: str
    definition: str
    version: int
    traceparent: str = ""


# The built-in activities a database worker runs (`lockstep.http`), called with (input, ctx).
Builtins = Mapping[str, Callable[[JSONValue, ActivityContext], JSONValue]]


def execute(
    registry: Registry,
    a: Attempt,
    beat: Callable[[], bool],
    worker_id: str,
    builtins: Builtins | None = None,
) -> list[Outcome]:
    """Run one attempt (never raises): its outcome, or two of them when the deliver-twice fail point
    is on (what a broker redelivering the message would cause; fencing must absorb the second)."""
    where = {"task": a.task_id, "attempt": a.attempt, "worker": worker_id}
    failpoints.hit("worker.before_call", **where)
    try:
        outcomes = [call_activity(registry, a, beat, worker_id, builtins)]
    except BaseException as exc:  # never leave a lease in flight without a result
        outcomes = [("fail", (type(exc).__name__, str(exc) or "worker error", True, True))]
    failpoints.hit("worker.after_call", **where)  # the effect is done, the report not yet sent
    if failpoints.enabled("worker.deliver_twice", **where):
        outcomes.append(call_activity(registry, a, beat, worker_id, builtins))
    return outcomes


def call_activity(
    registry: Registry,
    a: Attempt,
    beat: Callable[[], bool],
    worker_id: str,
    builtins: Builtins | None = None,
) -> Outcome:
    """Call the activity registered for `a.activity` (or the built-in of that name) with its input
    (and context)."""
    builtin = (builtins or {}).get(a.activity)
    fn = builtin or registry.get(a.activity)
    if fn is None:
        return ("fail", ("UnknownActivity", f"no function for {a.activity} on {worker_id}", True, False))
    key = a.idempotency_key
    if failpoints.enabled("unsafe.key_per_attempt", task=a.task_id):
        key = f"{key}#{a.attempt}"  # a broken build: retries look like new requests downstream
    ctx = ActivityContext(
        a.tenant,
        a.run_id,
        a.step,
        a.attempt,
        key,
        a.activity,
        a.definition,
        a.version,
        a.kind,
        beat,
        a.traceparent,
    )
    try:
        takes_ctx = builtin is not None or registry.takes_context(a.activity)
        args = (a.input, ctx) if takes_ctx else (a.input,)
        result = fn(*args)
        if inspect.isawaitable(result):
            result = asyncio.run(_await(result))
        return ("ok", result)
    except ActivityError as exc:
        return ("fail", (exc.code, exc.message, exc.retryable, False))
    except LeaseLost as exc:
        return ("fail", ("LeaseLost", str(exc), True, True))
    except Exception as exc:
        return ("fail", (type(exc).__name__, str(exc) or type(exc).__name__, True, True))


async def _await(aw: Awaitable[T]) -> T:
    return await aw
