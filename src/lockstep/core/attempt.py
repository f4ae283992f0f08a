"""The commands of an activity attempt: a worker claims its task, reports success or failure, or its lease
runs out. A report that no longer fits the attempt in flight is recorded as evidence (ResultIgnored) and
changes nothing; a failure retries on a durable timer, asks an operator, or fails the step."""

from __future__ import annotations

from typing import Any

from .commands import ClaimTask, ExpireLease, Rejected, ReportFailure, ReportSuccess
from .definition import ActivityStep, RetryPolicy
from .events import (
    ActivityFailed,
    ActivityStarted,
    ActivitySucceeded,
    ActivityTimedOut,
    NeedsAttention,
    ResultIgnored,
)
from .flow import (
    Tx,
    advance_after,
    fail,
    next_compensation,
    queued_attempt,
    settle,
    timer,
    winding_down,
)
from .lanes import attempt_of_task, step_of_task
from .paths import lane_of
from .state import Attempt, RunState

__all__ = ["claim", "expire_lease", "report"]


def claim(tx: Tx, c: ClaimTask) -> None:
    a = queued_attempt(tx, c.task_id)
    tx.emit(
        ActivityStarted(
            step=a.step,
            task_id=a.task_id,
            attempt=a.attempt,
            fencing=tx.s.seq + 1,
            worker=c.worker,
            deadline=c.deadline,
            compensation=a.kind == "compensation",
        )
    )


def _stale_reason(s: RunState, task: str, attempt: int, fencing: int) -> str | None:
    a = attempt_of_task(s, task)
    if s.terminal:
        return f"the run is already {s.status}"
    if a is None:
        return f"task {task} is not the run's current attempt"
    if a.attempt != attempt:
        return f"attempt {attempt} is not the current attempt {a.attempt}"
    if a.fencing is None:
        return "the attempt was not started by any worker"
    if a.fencing != fencing:
        return f"stale fencing token {fencing} (current {a.fencing})"
    return None


def _bound_ignored(tx: Tx, task: str, stale: str) -> None:
    """Stale reports are evidence, but a worker may replay one forever: past the first few per task (and
    per run) they are answered as ignored (Rejected `result_ignored`) without being appended."""
    s = tx.s
    per_task, per_run = tx.limits["max_ignored_results_per_attempt"], tx.limits["max_ignored_results_per_run"]
    if s.ignored_by_task.get(task, 0) >= per_task or s.ignored_results >= per_run:
        raise Rejected(
            "result_ignored",
            f"{stale}; the result changes nothing and is not recorded again (the run already records "
            f"{s.ignored_by_task.get(task, 0)} stale report(s) of task {task}, {s.ignored_results} in all)",
        )


def report(tx: Tx, c: ReportSuccess | ReportFailure) -> None:
    stale = _stale_reason(tx.s, c.task_id, c.attempt, c.fencing)
    if stale is not None:
        result: dict[str, Any] = (
            {"outcome": "succeeded", "output": c.output}
            if isinstance(c, ReportSuccess)
            else {"outcome": "failed", "code": c.code, "message": c.message}
        )
        _bound_ignored(tx, c.task_id, stale)
        step = step_of_task(c.task_id, tx.s.run_id) or "?"
        tx.emit(
            ResultIgnored(
                step=step,
                task_id=c.task_id,
                attempt=c.attempt,
                fencing=c.fencing,
                reason=stale,
                result=result,
            )
        )
        return
    a = attempt_of_task(tx.s, c.task_id)
    if a is None:  # pragma: no cover - _stale_reason returned None, so there is an active attempt
        raise Rejected("corrupt", "no active attempt")
    comp = a.kind == "compensation"
    if isinstance(c, ReportSuccess):
        spec = tx.d.step(a.step)
        compensable = isinstance(spec, ActivityStep) and spec.compensate is not None
        tx.emit(
            ActivitySucceeded(
                step=a.step,
                task_id=a.task_id,
                attempt=a.attempt,
                fencing=c.fencing,
                output=c.output,
                compensation=comp,
                compensable=compensable and not comp,
            )
        )
        _after_success(tx, a)
        return
    error = {"code": c.code, "message": c.message, "step": a.step, "attempt": a.attempt}
    unknown = a.delivery == "at_most_once" and c.unexpected and not comp
    _after_failure(tx, a, error, c.retryable and not unknown, unknown)


def _after_success(tx: Tx, a: Attempt) -> None:
    if a.kind == "compensation":
        next_compensation(tx)
    elif winding_down(tx.s, lane_of(a.step)):
        settle(tx)  # the run, or the lane it ran in, is being cancelled: the result was all it waited for
    else:
        advance_after(tx, a.step)


def _policy(tx: Tx, a: Attempt) -> RetryPolicy:
    step = tx.d.step(a.step)
    if not isinstance(step, ActivityStep):  # pragma: no cover - only activity steps have attempts
        raise Rejected("corrupt", f"step {a.step} is not an activity")
    if a.kind == "compensation" and step.compensate is not None:
        return step.compensate.retry
    return step.retry


def _after_failure(
    tx: Tx, a: Attempt, error: dict[str, Any], retryable: bool, unknown: bool, timed_out: str | None = None
) -> None:
    """Shared by reported failures and timeouts (`timed_out`: why the lease expired): retry on a durable
    timer, escalate, or fail the step."""
    policy = _policy(tx, a)
    comp = a.kind == "compensation"
    cancelling = winding_down(tx.s, lane_of(a.step)) and not comp
    will_retry = (
        retryable
        and not unknown
        and not cancelling
        and error["code"] not in policy.non_retryable
        and a.attempt < policy.max_attempts
    )
    if timed_out is None:
        tx.emit(
            ActivityFailed(
                step=a.step,
                task_id=a.task_id,
                attempt=a.attempt,
                activity=a.activity,
                error=error,
                will_retry=will_retry,
                outcome_unknown=unknown,
                compensation=comp,
            )
        )
    else:
        tx.emit(
            ActivityTimedOut(
                step=a.step,
                task_id=a.task_id,
                attempt=a.attempt,
                activity=a.activity,
                error=error,
                will_retry=will_retry,
                outcome_unknown=unknown,
                compensation=comp,
                reason=timed_out,
            )
        )
    if will_retry:
        delay = policy.delay(a.attempt)
        key = f"retry:{a.step}" + (":compensation" if comp else "")  # a step key: unique per lane
        timer(tx, key, "retry", a.step, tx.now + delay, attempt=a.attempt + 1, compensation=comp)
    elif unknown:
        tx.emit(
            NeedsAttention(
                step=a.step,
                code="outcome_unknown",
                reason=f"at-most-once activity {a.activity} (step {a.step}, attempt {a.attempt}) may or "
                f"may not have taken effect ({error['code']}: {error['message']}); it will not be retried "
                f"blindly: check the downstream system, then resolve the step or cancel the run",
            )
        )
    elif comp:
        tx.emit(
            NeedsAttention(
                step=a.step,
                code="compensation_failed",
                reason=f"compensation {a.activity} of step {a.step} failed for good after {a.attempt} "
                f"attempt(s) ({error['code']}: {error['message']})",
            )
        )
    elif cancelling:
        settle(tx)
    elif policy.on_exhausted == "dead_letter" and retryable and error["code"] not in policy.non_retryable:
        tx.emit(
            NeedsAttention(
                step=a.step,
                code="dead_letter",
                reason=f"activity {a.activity} (step {a.step}) exhausted its {a.attempt} attempt(s) "
                f"({error['code']}: {error['message']}); the step waits in the dead-letter state",
            )
        )
    else:
        fail(tx, error, lane_of(a.step))


def expire_lease(tx: Tx, c: ExpireLease) -> None:
    a = attempt_of_task(tx.s, c.task_id)
    if _stale_reason(tx.s, c.task_id, c.attempt, c.fencing) is not None or a is None:
        raise Rejected("stale_lease", f"task {c.task_id} attempt {c.attempt} is no longer in flight")
    error = {"code": "Timeout", "message": c.reason, "step": a.step, "attempt": a.attempt}
    unknown = a.delivery == "at_most_once" and a.kind == "action"
    _after_failure(tx, a, error, True, unknown, timed_out=c.reason)
