"""Operator commands on a run (dead letters and retries so far; pause, skip, resolve, edit-input and
migrate join them): each is a state-machine command with a reason and an audit event."""

from __future__ import annotations

from .commands import DeadLetter, Rejected, RetryStep
from .definition import ActivityStep
from .flow import Tx, next_compensation, schedule_action

__all__ = ["dead_letter", "retry_step"]

RETRYABLE_ATTENTION = ("dead_letter", "outcome_unknown", "compensation_failed")


def dead_letter(tx: Tx, c: DeadLetter) -> None:
    a = tx.s.active
    if tx.s.terminal or a is None or a.task_id != c.task_id:
        raise Rejected("stale_task", f"task {c.task_id} is no longer wanted by run {tx.s.run_id}")
    if a.fencing is not None:
        raise Rejected("already_started", f"task {c.task_id} was taken by {a.worker}; it is not dead")
    tx.emit(
        "ActivityDeadLettered",
        step=a.step,
        task_id=a.task_id,
        attempt=a.attempt,
        activity=a.activity,
        reason=c.reason,
        compensation=a.kind == "compensation",
    )
    tx.emit(
        "NeedsAttention",
        step=a.step,
        code="dead_letter",
        reason=f"task of {a.activity} (step {a.step}, attempt {a.attempt}) went to the dead-letter state: "
        f"{c.reason}",
    )


def retry_step(tx: Tx, c: RetryStep) -> None:
    s = tx.s
    att = s.attention
    if s.terminal:
        raise Rejected("terminal", f"the run is already {s.status}")
    if att is None or att["step"] != c.step:
        where = f"step {att['step']}" if att else "no step"
        raise Rejected(
            "not_retryable", f"step {c.step} does not wait for an operator (attention is on {where})"
        )
    if att["code"] not in RETRYABLE_ATTENTION:
        raise Rejected("not_retryable", f"a step in state {att['code']} cannot be retried")
    if not c.reason.strip():
        raise Rejected("reason_required", "a retry needs a reason")
    step = tx.d.step(c.step)
    if not isinstance(step, ActivityStep):  # pragma: no cover - attention is only raised on activities
        raise Rejected("not_retryable", f"step {c.step} is not an activity")
    prev = s.steps[c.step]
    comp = att["code"] == "compensation_failed"
    attempt = ((prev.compensation or {}).get("attempts", 0) if comp else prev.attempts) + 1
    tx.emit(
        "StepRetried",
        step=c.step,
        reason=c.reason,
        actor=c.actor,
        new_key=c.new_key,
        code=att["code"],
        attempt=attempt,
        compensation=comp,
    )
    if comp:
        next_compensation(tx, attempt=attempt)
    else:
        schedule_action(tx, step, attempt, key_suffix=f"~retry{tx.s.seq}" if c.new_key else "")
