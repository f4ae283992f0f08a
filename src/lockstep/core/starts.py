"""Entering one step: what it records when it starts, or the error that fails it instead (flow.py fails
the step, so this module never calls back into it). Pure like the rest of the core."""

from __future__ import annotations

import hashlib
from typing import Any

from .canonical import JSONValue, digest
from .definition import ActivityStep, ApprovalStep, ChoiceStep, ForEachStep, RunStep, WaitStep
from .events import UNSET, ActivityScheduled, ApprovalRequested, ChildRunRequested, ChoiceEvaluated
from .expr import ExprError, evaluate
from .paths import lane_of
from .state import StepState
from .timeutil import iso, parse_iso
from .tx import Tx, expression_context, task_id, timer

__all__ = ["Error", "activity", "approval", "child", "choose", "for_each_items", "wait"]

Error = dict[str, Any]


def choose(tx: Tx, key: str, step: ChoiceStep, ctx: dict[str, Any]) -> tuple[str | None, Error | None]:
    """The target of a choice (recorded as ChoiceEvaluated), or why it cannot choose."""
    for i, (cond, target) in enumerate(step.branches):
        try:
            hit = evaluate(cond, ctx)
        except ExprError as exc:
            return None, {"code": "ExpressionError", "message": str(exc), "step": key}
        if not isinstance(hit, bool):
            return None, {
                "code": "ExpressionError",
                "step": key,
                "message": f"`{cond.source}` gave {hit!r}, not true or false",
            }
        if hit:
            tx.emit(ChoiceEvaluated(step=key, branch=i, condition=cond.source, next=target))
            return target, None
    if step.default is None:
        return None, {
            "code": "NoBranchMatched",
            "step": key,
            "message": "no choice branch matched and there is no else",
        }
    tx.emit(ChoiceEvaluated(step=key, branch="else", condition=None, next=step.default))
    return step.default, None


def activity(
    tx: Tx, step: ActivityStep, attempt: int, key_suffix: str, key: str | None, at: str
) -> Error | None:
    """Schedule an attempt of activity step `at` (`key`: the idempotency key to reuse, else computed)."""
    ctx = expression_context(tx.s, lane_of(at))
    try:
        payload = step.input.render(ctx)
        if key is None:
            key = (
                str(step.idempotency_key.render(ctx))
                if step.idempotency_key is not None
                else f"{tx.s.tenant}:{tx.s.run_id}:{at}"
            ) + key_suffix
    except ExprError as exc:
        return {"code": "ExpressionError", "message": str(exc), "step": at}
    tx.emit(
        ActivityScheduled(
            step=at,
            attempt=attempt,
            task_id=task_id(tx.s.run_id, at, "action", attempt, tx.s.seq + 1),
            activity=step.activity,
            input=payload,
            idempotency_key=key,
            delivery=step.delivery,
            timeout_ms=int(step.timeout.total_seconds() * 1000),
            queue=step.queue,
            priority=step.priority,
            max_attempts=step.retry.max_attempts,
        )
    )
    return None


def wait(tx: Tx, key: str, step: WaitStep, ctx: dict[str, Any]) -> Error | None:
    if step.duration is not None:
        fire_at = tx.now + step.duration
    else:
        try:
            raw = step.until.render(ctx) if step.until is not None else None
            fire_at = parse_iso(str(raw))
        except (ExprError, ValueError) as exc:
            return {
                "code": "ExpressionError",
                "step": key,
                "message": f"wait.until must give an ISO-8601 time: {exc}",
            }
        fire_at = max(fire_at, tx.now)
    timer(tx, f"wait:{key}", "wait", key, fire_at)
    return None


def approval(tx: Tx, step: ApprovalStep, ctx: dict[str, Any], key: str) -> Error | None:
    """Record the request with its policy and arm the durable timeout."""
    try:
        details = step.details.render(ctx)
    except ExprError as exc:
        return {"code": "ExpressionError", "message": f"approval details: {exc}", "step": key}
    n = tx.s.steps.get(key, StepState()).attempts + 1
    policy = step.policy()
    expires = tx.now + step.timeout
    warnings = tx.d.approver_warnings.get(step.id)
    tx.emit(
        ApprovalRequested(
            step=key,
            request_id=f"{tx.s.run_id}/{key}/r{n}",
            policy=policy,
            policy_digest=digest({"definition": tx.s.definition, "step": key, "policy": policy}),
            details=details if isinstance(details, str) else str(details),
            expires_at=iso(expires),
            initiator=tx.s.actor,
            warnings=list(warnings) if warnings else UNSET,
        )
    )
    timer(tx, f"approval:{key}", "approval", key, expires)
    return None


def child(tx: Tx, key: str, step: RunStep, ctx: dict[str, Any]) -> Error | None:
    """Request a child run (the outbox starts it). Its id is derived from the parent, the step and the
    visit (time-ordered like every run id, and as unguessable as the parent's), and so is its start key:
    a retried start of the same visit can only find the same child."""
    try:
        payload = step.input.render(ctx)
    except ExprError as exc:
        return {"code": "ExpressionError", "message": f"run input: {exc}", "step": key}
    s = tx.s
    visit = s.steps.get(key, StepState()).attempts + 1
    start_key = f"{s.run_id}:{key}" + (f":{visit}" if visit > 1 else "")
    seed = hashlib.sha256(f"lockstep-child\n{s.tenant}\n{s.run_id}\n{key}\n{visit}".encode()).hexdigest()
    tx.emit(
        ChildRunRequested(
            step=key,
            child_run_id=f"{int(tx.now.timestamp() * 1000):012x}{seed[:20]}",
            definition=step.definition,
            version=step.version,
            input=payload,
            start_key=start_key,
            depth=int((s.parent or {}).get("depth", 0)) + 1,
        )
    )
    return None


def for_each_items(key: str, step: ForEachStep, ctx: dict[str, Any]) -> tuple[list[JSONValue], Error | None]:
    """The list a for-each runs over, or why it cannot run (not a list, longer than its max_items)."""
    try:
        items = step.items.render(ctx)
    except ExprError as exc:
        return [], {"code": "ExpressionError", "message": f"for_each items: {exc}", "step": key}
    if not isinstance(items, list):
        what = "null" if items is None else type(items).__name__
        message = f"for_each items must give a list; `{step.items.raw}` gave {what}"
        return [], {"code": "InvalidItems", "message": message, "step": key}
    if len(items) > step.max_items:
        message = (
            f"the items gave {len(items)} elements; step {key} runs at most {step.max_items} "
            f"(its max_items, within the tenant's): split the list, or raise max_items"
        )
        return [], {"code": "TooManyItems", "message": message, "step": key}
    return items, None
