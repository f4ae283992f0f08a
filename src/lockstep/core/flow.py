"""How a run moves through its steps: entering steps, scheduling attempts and timers, failing and
compensating. Shared by the command handlers (decide.py and the command families beside it); pure like
the rest of the core. The transaction `Tx` and the small moves every handler makes on it are in tx.py,
and re-exported here, so a handler imports its whole vocabulary from one place."""

from __future__ import annotations

from typing import Any

from .canonical import digest
from .commands import Rejected
from .definition import (
    ActivityStep,
    ApprovalStep,
    ChoiceStep,
    FailStep,
    SucceedStep,
    WaitStep,
)
from .events import (
    UNSET,
    ActivityScheduled,
    ApprovalRequested,
    ChoiceEvaluated,
    CompensationScheduled,
    CompensationStarted,
    NeedsAttention,
    RunCancelled,
    RunCompleted,
    RunFailed,
    StepFailed,
)
from .expr import ExprError, evaluate
from .timeutil import iso, parse_iso
from .tx import (
    Tx,
    cancel_timers,
    defer,
    expression_context,
    queued_attempt,
    run_of_task,
    task_id,
    timer,
    withdraw,
)

__all__ = [
    "Tx",
    "advance_after",
    "begin_cancel",
    "cancel_timers",
    "complete",
    "continue_run",
    "defer",
    "enter",
    "expression_context",
    "fail",
    "next_compensation",
    "queued_attempt",
    "request_approval",
    "resume_deferred",
    "run_of_task",
    "schedule_action",
    "step_failed",
    "task_id",
    "timer",
    "withdraw",
]


def resume_deferred(tx: Tx, action: str, args: dict[str, Any]) -> None:
    """Carry out one deferred transition (see defer)."""
    if action == "enter":
        enter(tx, args["step"])
    elif action == "schedule_action":
        step = tx.d.step(args["step"])
        if isinstance(step, ActivityStep):
            schedule_action(tx, step, args["attempt"], args.get("key_suffix", ""), args.get("key"))
    elif action == "next_compensation":
        next_compensation(tx, args["attempt"])
    elif action == "fail":
        fail(tx, args["error"])


def continue_run(tx: Tx) -> None:
    """Work out the next transition from the state alone (after a migration replaced the transitions a
    pause had held back, which were computed for the old version)."""
    cur = tx.s.current_step
    if cur is None or tx.s.terminal:
        return
    st = tx.s.steps.get(cur)
    if st is not None and st.status in ("succeeded", "skipped"):
        advance_after(tx, cur)
    elif st is not None and st.status == "failed":
        fail(tx, st.error or {"code": "Failed", "message": f"step {cur} failed", "step": cur})
    else:
        enter(tx, cur)


def enter(tx: Tx, step_id: str | None) -> None:
    """Enter steps until one must wait (activity, timer) or the run ends."""
    if defer(tx, "enter", step=step_id):
        return
    while True:
        if step_id is None:
            complete(tx, None)
            return
        step = tx.d.step(step_id)
        ctx = expression_context(tx.s)
        if isinstance(step, ActivityStep):
            schedule_action(tx, step, 1)
            return
        if isinstance(step, WaitStep):
            schedule_wait(tx, step, ctx)
            return
        if isinstance(step, FailStep):
            try:
                message = step.message.render(ctx)
            except ExprError as exc:
                message = f"(message could not be rendered: {exc})"
            step_failed(tx, step.id, {"code": step.error, "message": str(message), "step": step.id})
            return
        if isinstance(step, SucceedStep):
            complete(tx, step)
            return
        if isinstance(step, ApprovalStep):
            request_approval(tx, step, ctx)
            return
        if isinstance(step, ChoiceStep):
            target = _choose(tx, step, ctx)
            if target is None:
                return
            step_id = None if target == "end" else target


def _choose(tx: Tx, step: ChoiceStep, ctx: dict[str, Any]) -> str | None:
    for i, (cond, target) in enumerate(step.branches):
        try:
            hit = evaluate(cond, ctx)
        except ExprError as exc:
            step_failed(tx, step.id, {"code": "ExpressionError", "message": str(exc), "step": step.id})
            return None
        if not isinstance(hit, bool):
            step_failed(
                tx,
                step.id,
                {
                    "code": "ExpressionError",
                    "step": step.id,
                    "message": f"`{cond.source}` gave {hit!r}, not true or false",
                },
            )
            return None
        if hit:
            tx.emit(ChoiceEvaluated(step=step.id, branch=i, condition=cond.source, next=target))
            return target
    if step.default is None:
        step_failed(
            tx,
            step.id,
            {
                "code": "NoBranchMatched",
                "step": step.id,
                "message": "no choice branch matched and there is no else",
            },
        )
        return None
    tx.emit(ChoiceEvaluated(step=step.id, branch="else", condition=None, next=step.default))
    return step.default


def advance_after(tx: Tx, step_id: str) -> None:
    enter(tx, tx.d.following(step_id))


def complete(tx: Tx, succeed: SucceedStep | None) -> None:
    ctx = expression_context(tx.s)
    template = succeed.output if succeed is not None and succeed.output is not None else tx.d.output
    try:
        if template is not None:
            output = template.render(ctx)
        else:
            last = tx.s.last_output_step
            output = tx.s.steps[last].output if last is not None else None
    except ExprError as exc:
        step_failed(
            tx,
            succeed.id if succeed else (tx.s.current_step or "output"),
            {"code": "ExpressionError", "message": f"run output: {exc}", "step": None},
        )
        return
    tx.emit(RunCompleted(output=output))


def schedule_action(
    tx: Tx, step: ActivityStep, attempt: int, key_suffix: str = "", key: str | None = None
) -> None:
    """`key`: the idempotency key to reuse (an operator's retry of the same effect), else computed."""
    extra = {"key": key} if key is not None else {}
    if defer(tx, "schedule_action", step=step.id, attempt=attempt, key_suffix=key_suffix, **extra):
        return
    ctx = expression_context(tx.s)
    try:
        payload = step.input.render(ctx)
        if key is None:
            key = (
                str(step.idempotency_key.render(ctx))
                if step.idempotency_key is not None
                else f"{tx.s.tenant}:{tx.s.run_id}:{step.id}"
            ) + key_suffix
    except ExprError as exc:
        step_failed(tx, step.id, {"code": "ExpressionError", "message": str(exc), "step": step.id})
        return
    tx.emit(
        ActivityScheduled(
            step=step.id,
            attempt=attempt,
            task_id=task_id(tx.s.run_id, step.id, "action", attempt, tx.s.seq + 1),
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


def schedule_wait(tx: Tx, step: WaitStep, ctx: dict[str, Any]) -> None:
    if step.duration is not None:
        fire_at = tx.now + step.duration
    else:
        try:
            raw = step.until.render(ctx) if step.until is not None else None
            fire_at = parse_iso(str(raw))
        except (ExprError, ValueError) as exc:
            step_failed(
                tx,
                step.id,
                {
                    "code": "ExpressionError",
                    "step": step.id,
                    "message": f"wait.until must give an ISO-8601 time: {exc}",
                },
            )
            return
        fire_at = max(fire_at, tx.now)
    timer(tx, f"wait:{step.id}", "wait", step.id, fire_at)


def request_approval(tx: Tx, step: ApprovalStep, ctx: dict[str, Any]) -> None:
    """Enter an approval step: record the request with its policy and arm the durable timeout."""
    try:
        details = step.details.render(ctx)
    except ExprError as exc:
        step_failed(
            tx, step.id, {"code": "ExpressionError", "message": f"approval details: {exc}", "step": step.id}
        )
        return
    n = tx.s.steps[step.id].attempts + 1
    policy = step.policy()
    expires = tx.now + step.timeout
    warnings = tx.d.approver_warnings.get(step.id)
    tx.emit(
        ApprovalRequested(
            step=step.id,
            request_id=f"{tx.s.run_id}/{step.id}/r{n}",
            policy=policy,
            policy_digest=digest({"definition": tx.s.definition, "step": step.id, "policy": policy}),
            details=details if isinstance(details, str) else str(details),
            expires_at=iso(expires),
            initiator=tx.s.actor,
            warnings=list(warnings) if warnings else UNSET,
        )
    )
    timer(tx, f"approval:{step.id}", "approval", step.id, expires)


# --- failure and compensation ----------------------------------------------------------------------


def step_failed(tx: Tx, step_id: str, error: dict[str, Any]) -> None:
    tx.emit(StepFailed(step=step_id, error=error))
    fail(tx, error)


def fail(tx: Tx, error: dict[str, Any]) -> None:
    """A step failed for good: compensate completed steps in reverse order, then end failed."""
    if defer(tx, "fail", error=error):
        return
    if tx.s.completed:
        tx.emit(CompensationStarted(cause="failed", error=error, steps=list(reversed(tx.s.completed))))
        next_compensation(tx)
    else:
        tx.emit(RunFailed(error=error))


def begin_cancel(tx: Tx) -> None:
    if tx.s.completed:
        tx.emit(CompensationStarted(cause="cancelled", error=None, steps=list(reversed(tx.s.completed))))
        next_compensation(tx)
    else:
        cancel = tx.s.cancel or {}
        tx.emit(RunCancelled(reason=cancel.get("reason")))


def next_compensation(tx: Tx, attempt: int = 1) -> None:
    if defer(tx, "next_compensation", attempt=attempt):
        return
    remaining = tx.s.compensating or ()
    if not remaining:
        if tx.s.compensation_cause == "cancelled":
            tx.emit(RunCancelled(reason=(tx.s.cancel or {}).get("reason")))
        else:
            tx.emit(RunFailed(error=tx.s.error))
        return
    step_id = remaining[0]
    step = tx.d.step(step_id)
    if not isinstance(step, ActivityStep) or step.compensate is None:  # pragma: no cover - only these enter
        raise Rejected("corrupt", f"step {step_id} has no compensation")
    comp = step.compensate
    ctx = expression_context(tx.s)
    try:
        payload = comp.input.render(ctx)
    except ExprError as exc:
        tx.emit(
            NeedsAttention(
                step=step_id,
                code="compensation_input_error",
                reason=f"the compensation input of step {step_id} cannot be built: {exc}",
            )
        )
        return
    base_key = tx.s.steps[step_id].idempotency_key or f"{tx.s.tenant}:{tx.s.run_id}:{step_id}"
    tx.emit(
        CompensationScheduled(
            step=step_id,
            attempt=attempt,
            compensation=True,
            task_id=task_id(tx.s.run_id, step_id, "compensation", attempt, tx.s.seq + 1),
            activity=comp.activity,
            input=payload,
            idempotency_key=f"{base_key}:compensate",
            delivery="idempotent",
            timeout_ms=int(comp.timeout.total_seconds() * 1000),
            queue=comp.queue,
            max_attempts=comp.retry.max_attempts,
        )
    )
