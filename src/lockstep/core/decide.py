"""decide(state, command, now, definition) -> events: the whole behaviour of a run, as a pure function.

Each emitted event is folded immediately (evolve), so later decisions in the same command see it:
one command may pass through several instant steps (choice, fail, succeed) before it must wait.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, assert_never

from .approval import (
    decide_approval,
    issue_link,
    on_approval_timeout,
    replace_approver,
    revoke_link,
    settle_cancel,
)
from .commands import (
    CancelRun,
    ClaimTask,
    Command,
    ConfirmRepair,
    DeadLetter,
    DecideApproval,
    EditInput,
    ExpireLease,
    FireTimer,
    IssueApprovalLink,
    MigrateRun,
    PauseRun,
    Rejected,
    RejectRepair,
    ReplaceApprover,
    ReportFailure,
    ReportSuccess,
    ResolveStep,
    ResumeRun,
    RetryStep,
    RevokeApprovalLink,
    SkipStep,
    StartRun,
)
from .definition import (
    ActivityStep,
    Definition,
    DefinitionError,
    RetryPolicy,
)
from .events import (
    ActivityFailed,
    ActivityStarted,
    ActivitySucceeded,
    ActivityTimedOut,
    CancelRequested,
    Event,
    NeedsAttention,
    ResultIgnored,
    RunStarted,
    TimerFired,
)
from .flow import (
    Tx,
    advance_after,
    begin_cancel,
    cancel_timers,
    enter,
    expression_context,
    fail,
    next_compensation,
    queued_attempt,
    schedule_action,
    task_id,
    timer,
    withdraw,
)
from .foureyes import confirm_repair, needs_second_operator, propose_repair, reject_repair
from .limits import DEFAULT_SERVER_LIMITS, ServerLimits
from .migrate import migrate
from .repair import dead_letter, edit_input, pause, resolve, resume, retry_step, skip
from .state import Attempt, RunState
from .timeutil import format_duration, parse_iso

__all__ = ["decide", "expression_context", "task_id"]


def decide(
    state: RunState | None,
    command: Command,
    now: datetime,
    definition: Definition,
    max_events: int | None = None,
    limits: ServerLimits = DEFAULT_SERVER_LIMITS,
) -> list[Event]:
    """Events for command, or raise Rejected. Never reads anything but its arguments.

    `max_events` is the tenant's history limit: a run that reaches it is cancelled (with compensation)
    so a runaway loop cannot grow without bound. `limits` are the server's (HISTORY_LIMITS bound the
    events people and workers can make a run repeat)."""
    tx = Tx(state, now, definition, limits)
    _dispatch(tx, command)
    s = tx.state
    if (
        max_events is not None
        and s is not None
        and not s.terminal
        and s.seq >= max_events
        and (s.cancel is None and s.compensating is None)
    ):
        _cancel(
            tx,
            CancelRun(
                f"history limit reached: {s.seq} events (the tenant allows {max_events}); "
                f"a step may be looping",
                "lockstep",
            ),
        )
    return tx.events


def _dispatch(tx: Tx, c: Command) -> None:
    """Every kind of command has its case (mypy checks that none is missing: assert_never)."""
    match c:
        case StartRun():
            _start(tx, c)
        case _ if tx.state is None:
            raise Rejected("no_run", "the run does not exist")
        case ClaimTask():
            _claim(tx, c)
        case ReportSuccess() | ReportFailure():
            _report(tx, c)
        case ExpireLease():
            _expire(tx, c)
        case FireTimer():
            _fire(tx, c)
        case CancelRun():
            _cancel(tx, c)
        case DecideApproval():
            decide_approval(tx, c)
        case IssueApprovalLink():
            issue_link(tx, c)
        case ReplaceApprover():
            replace_approver(tx, c)
        case RevokeApprovalLink():
            revoke_link(tx, c)
        case DeadLetter():
            dead_letter(tx, c)
        case RetryStep():
            retry_step(tx, c)
        case PauseRun():
            pause(tx, c)
        case ResumeRun():
            resume(tx, c)
        case SkipStep() | ResolveStep() | MigrateRun() if needs_second_operator(tx, c):
            propose_repair(tx, c)
        case SkipStep():
            skip(tx, c)
        case EditInput():
            edit_input(tx, c)
        case ResolveStep():
            resolve(tx, c)
        case MigrateRun():
            migrate(tx, c)
        case ConfirmRepair():
            confirm_repair(tx, c)
        case RejectRepair():
            reject_repair(tx, c)
        case _:
            assert_never(c)


# --- starting and moving through steps -------------------------------------------------------------


def now_plus(tx: Tx, ms: int) -> datetime:
    return tx.now + timedelta(milliseconds=ms)


def _start(tx: Tx, c: StartRun) -> None:
    if tx.state is not None:
        raise Rejected("exists", f"run {c.run_id} already exists")
    try:
        tx.d.check_input(c.input)
    except DefinitionError as exc:
        raise Rejected("invalid_input", str(exc)) from None
    tx.emit(
        RunStarted(
            run_id=c.run_id,
            tenant=c.tenant,
            definition={"name": tx.d.name, "version": c.version, "digest": tx.d.digest},
            input=c.input,
            start_key=c.start_key,
            actor=c.actor,
            steps=[s.id for s in tx.d.steps],
        )
    )
    if c.max_run_ms is not None:
        timer(tx, "deadline", "deadline", "(run)", now_plus(tx, c.max_run_ms))
    enter(tx, tx.d.steps[0].id)


# --- activity attempts -----------------------------------------------------------------------------


def _claim(tx: Tx, c: ClaimTask) -> None:
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
    a = s.active
    if s.terminal:
        return f"the run is already {s.status}"
    if a is None or a.task_id != task:
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


def _report(tx: Tx, c: ReportSuccess | ReportFailure) -> None:
    stale = _stale_reason(tx.s, c.task_id, c.attempt, c.fencing)
    if stale is not None:
        result: dict[str, Any] = (
            {"outcome": "succeeded", "output": c.output}
            if isinstance(c, ReportSuccess)
            else {"outcome": "failed", "code": c.code, "message": c.message}
        )
        _bound_ignored(tx, c.task_id, stale)
        parts = c.task_id.split("/")
        step = (
            tx.s.active.step
            if tx.s.active and tx.s.active.task_id == c.task_id
            else (parts[1] if len(parts) == 3 and parts[0] == tx.s.run_id else "?")
        )
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
    a = tx.s.active
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
    elif tx.s.cancel is not None:
        begin_cancel(tx)
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
    cancelling = tx.s.cancel is not None and not comp
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
        key = f"retry:{a.step}" + (":compensation" if comp else "")
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
        begin_cancel(tx)
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
        fail(tx, error)


def _expire(tx: Tx, c: ExpireLease) -> None:
    a = tx.s.active
    if _stale_reason(tx.s, c.task_id, c.attempt, c.fencing) is not None or a is None:
        raise Rejected("stale_lease", f"task {c.task_id} attempt {c.attempt} is no longer in flight")
    error = {"code": "Timeout", "message": c.reason, "step": a.step, "attempt": a.attempt}
    unknown = a.delivery == "at_most_once" and a.kind == "action"
    _after_failure(tx, a, error, True, unknown, timed_out=c.reason)


def _fire(tx: Tx, c: FireTimer) -> None:
    t = tx.s.timers.get(c.key)
    if tx.s.terminal or t is None or t.generation != c.generation:
        raise Rejected("stale_timer", f"timer {c.key} generation {c.generation} is no longer armed")
    if parse_iso(t.fire_at) > tx.now:
        raise Rejected("not_due", f"timer {c.key} is due at {t.fire_at}, not yet")
    tx.emit(TimerFired(key=t.key, generation=t.generation, kind=t.kind, step=t.step, fire_at=t.fire_at))
    if t.kind == "wait":
        advance_after(tx, t.step)
        return
    if t.kind == "approval":
        on_approval_timeout(tx, t.step)
        return
    if t.kind == "deadline":
        if tx.s.cancel is None and tx.s.compensating is None:
            limit = format_duration(parse_iso(t.fire_at) - parse_iso(tx.s.started_at))
            _cancel(tx, CancelRun(f"run time limit reached: the tenant allows {limit} per run", "lockstep"))
        return
    step = tx.d.step(t.step)
    if not isinstance(step, ActivityStep):  # pragma: no cover
        raise Rejected("corrupt", f"retry timer on non-activity step {t.step}")
    previous = tx.s.steps[t.step]
    if t.key.endswith(":compensation"):
        next_compensation(tx, attempt=(previous.compensation or {}).get("attempts", 0) + 1)
    else:
        schedule_action(tx, step, previous.attempts + 1)


def _cancel(tx: Tx, c: CancelRun) -> None:
    s = tx.s
    if s.terminal:
        raise Rejected("terminal", f"the run is already {s.status}; there is nothing to cancel")
    if s.cancel is not None:
        return  # cancelling twice is the same request: no new events
    if s.compensating is not None:
        if s.attention is not None:
            raise Rejected("compensating", f"the run waits for an operator: {s.attention['reason']}")
        raise Rejected("compensating", "the run is already compensating after a failure and will end failed")
    tx.emit(CancelRequested(reason=c.reason, actor=c.actor))
    cancel_timers(tx, "run cancelled")
    settle_cancel(tx)
    a = tx.s.active
    if a is not None and a.fencing is None:
        withdraw(tx, a, "run cancelled before any worker started it")
        a = None
    if a is None:
        begin_cancel(tx)
