"""decide(state, command, now, definition) -> events: the whole behaviour of a run, as a pure function.

Each emitted event is folded immediately (evolve), so later decisions in the same command see it:
one command may pass through several instant steps (choice, fail, succeed) before it must wait.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .commands import (
    CancelRun,
    ClaimTask,
    Command,
    ExpireLease,
    FireTimer,
    Rejected,
    ReportFailure,
    ReportSuccess,
    StartRun,
)
from .definition import (
    ActivityStep,
    ChoiceStep,
    Definition,
    DefinitionError,
    FailStep,
    RetryPolicy,
    SucceedStep,
    WaitStep,
)
from .events import Event
from .expr import ExprError, evaluate
from .state import Attempt, RunState, evolve
from .timeutil import iso, parse_iso

__all__ = ["decide", "expression_context", "task_id"]


def task_id(run_id: str, step: str, kind: str, attempt: int) -> str:
    """Deterministic task ids: the same attempt always has the same id, whoever computes it."""
    return f"{run_id}/{step}/{'c' if kind == 'compensation' else 'a'}{attempt}"


def expression_context(state: RunState) -> dict[str, Any]:
    return {
        "input": state.input,
        "steps": {
            sid: {"output": st.output, "status": st.status, "attempts": st.attempts}
            for sid, st in state.steps.items()
        },
        "run": {
            "id": state.run_id,
            "tenant": state.tenant,
            "definition": state.definition["name"],
            "version": state.definition["version"],
            "started_at": state.started_at,
        },
    }


class _Tx:
    """Accumulates events, folding each one so the next decision sees the updated state."""

    def __init__(self, state: RunState | None, now: datetime, definition: Definition) -> None:
        self.state = state
        self.now = now
        self.at = iso(now)
        self.d = definition
        self.events: list[Event] = []

    @property
    def s(self) -> RunState:
        if self.state is None:
            raise Rejected("no_run", "the run does not exist")
        return self.state

    def emit(self, type_: str, **data: Any) -> None:
        seq = (self.state.seq if self.state else 0) + 1
        e = Event(type=type_, at=self.at, data=data, seq=seq)
        self.state = evolve(self.state, e)
        self.events.append(e)


def decide(state: RunState | None, command: Command, now: datetime, definition: Definition) -> list[Event]:
    """Events for command, or raise Rejected. Never reads anything but its arguments."""
    tx = _Tx(state, now, definition)
    if isinstance(command, StartRun):
        _start(tx, command)
    elif state is None:
        raise Rejected("no_run", "the run does not exist")
    elif isinstance(command, ClaimTask):
        _claim(tx, command)
    elif isinstance(command, ReportSuccess | ReportFailure):
        _report(tx, command)
    elif isinstance(command, ExpireLease):
        _expire(tx, command)
    elif isinstance(command, FireTimer):
        _fire(tx, command)
    elif isinstance(command, CancelRun):
        _cancel(tx, command)
    else:  # pragma: no cover - the Command union is closed
        raise Rejected("unknown_command", f"unknown command {type(command).__name__}")
    return tx.events


# --- starting and moving through steps -------------------------------------------------------------


def _start(tx: _Tx, c: StartRun) -> None:
    if tx.state is not None:
        raise Rejected("exists", f"run {c.run_id} already exists")
    try:
        tx.d.check_input(c.input)
    except DefinitionError as exc:
        raise Rejected("invalid_input", str(exc)) from None
    tx.emit(
        "RunStarted",
        run_id=c.run_id,
        tenant=c.tenant,
        definition={"name": tx.d.name, "version": c.version, "digest": tx.d.digest},
        input=c.input,
        start_key=c.start_key,
        actor=c.actor,
        steps=[s.id for s in tx.d.steps],
    )
    _enter(tx, tx.d.steps[0].id)


def _enter(tx: _Tx, step_id: str | None) -> None:
    """Enter steps until one must wait (activity, timer) or the run ends."""
    while True:
        if step_id is None:
            _complete(tx, None)
            return
        step = tx.d.step(step_id)
        ctx = expression_context(tx.s)
        if isinstance(step, ActivityStep):
            _schedule_action(tx, step, 1)
            return
        if isinstance(step, WaitStep):
            _schedule_wait(tx, step, ctx)
            return
        if isinstance(step, FailStep):
            try:
                message = step.message.render(ctx)
            except ExprError as exc:
                message = f"(message could not be rendered: {exc})"
            _step_failed(tx, step.id, {"code": step.error, "message": str(message), "step": step.id})
            return
        if isinstance(step, SucceedStep):
            _complete(tx, step)
            return
        if isinstance(step, ChoiceStep):
            target = _choose(tx, step, ctx)
            if target is None:
                return
            step_id = None if target == "end" else target


def _choose(tx: _Tx, step: ChoiceStep, ctx: dict[str, Any]) -> str | None:
    for i, (cond, target) in enumerate(step.branches):
        try:
            hit = evaluate(cond, ctx)
        except ExprError as exc:
            _step_failed(tx, step.id, {"code": "ExpressionError", "message": str(exc), "step": step.id})
            return None
        if not isinstance(hit, bool):
            _step_failed(
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
            tx.emit("ChoiceEvaluated", step=step.id, branch=i, condition=cond.source, next=target)
            return target
    if step.default is None:
        _step_failed(
            tx,
            step.id,
            {
                "code": "NoBranchMatched",
                "step": step.id,
                "message": "no choice branch matched and there is no else",
            },
        )
        return None
    tx.emit("ChoiceEvaluated", step=step.id, branch="else", condition=None, next=step.default)
    return step.default


def _advance_after(tx: _Tx, step_id: str) -> None:
    _enter(tx, tx.d.following(step_id))


def _complete(tx: _Tx, succeed: SucceedStep | None) -> None:
    ctx = expression_context(tx.s)
    template = succeed.output if succeed is not None and succeed.output is not None else tx.d.output
    try:
        if template is not None:
            output = template.render(ctx)
        else:
            last = tx.s.last_output_step
            output = tx.s.steps[last].output if last is not None else None
    except ExprError as exc:
        _step_failed(
            tx,
            succeed.id if succeed else (tx.s.current_step or "output"),
            {"code": "ExpressionError", "message": f"run output: {exc}", "step": None},
        )
        return
    tx.emit("RunCompleted", output=output)


def _schedule_action(tx: _Tx, step: ActivityStep, attempt: int) -> None:
    ctx = expression_context(tx.s)
    try:
        payload = step.input.render(ctx)
        key = (
            str(step.idempotency_key.render(ctx))
            if step.idempotency_key is not None
            else f"{tx.s.tenant}:{tx.s.run_id}:{step.id}"
        )
    except ExprError as exc:
        _step_failed(tx, step.id, {"code": "ExpressionError", "message": str(exc), "step": step.id})
        return
    tx.emit(
        "ActivityScheduled",
        step=step.id,
        attempt=attempt,
        task_id=task_id(tx.s.run_id, step.id, "action", attempt),
        activity=step.activity,
        input=payload,
        idempotency_key=key,
        delivery=step.delivery,
        timeout_ms=int(step.timeout.total_seconds() * 1000),
        queue=step.queue,
        max_attempts=step.retry.max_attempts,
    )


def _schedule_wait(tx: _Tx, step: WaitStep, ctx: dict[str, Any]) -> None:
    if step.duration is not None:
        fire_at = tx.now + step.duration
    else:
        try:
            raw = step.until.render(ctx) if step.until is not None else None
            fire_at = parse_iso(str(raw))
        except (ExprError, ValueError) as exc:
            _step_failed(
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
    _timer(tx, f"wait:{step.id}", "wait", step.id, fire_at)


def _timer(tx: _Tx, key: str, kind: str, step: str, fire_at: datetime, **extra: Any) -> None:
    generation = tx.s.seq + 1  # the seq of the TimerScheduled event: unique and increasing per run
    tx.emit(
        "TimerScheduled", key=key, generation=generation, kind=kind, step=step, fire_at=iso(fire_at), **extra
    )


# --- failure and compensation ----------------------------------------------------------------------


def _step_failed(tx: _Tx, step_id: str, error: dict[str, Any]) -> None:
    tx.emit("StepFailed", step=step_id, error=error)
    _fail(tx, error)


def _fail(tx: _Tx, error: dict[str, Any]) -> None:
    """A step failed for good: compensate completed steps in reverse order, then end failed."""
    if tx.s.completed:
        tx.emit("CompensationStarted", cause="failed", error=error, steps=list(reversed(tx.s.completed)))
        _next_compensation(tx)
    else:
        tx.emit("RunFailed", error=error)


def _begin_cancel(tx: _Tx) -> None:
    if tx.s.completed:
        tx.emit("CompensationStarted", cause="cancelled", error=None, steps=list(reversed(tx.s.completed)))
        _next_compensation(tx)
    else:
        cancel = tx.s.cancel or {}
        tx.emit("RunCancelled", reason=cancel.get("reason"))


def _next_compensation(tx: _Tx, attempt: int = 1) -> None:
    remaining = tx.s.compensating or ()
    if not remaining:
        if tx.s.compensation_cause == "cancelled":
            tx.emit("RunCancelled", reason=(tx.s.cancel or {}).get("reason"))
        else:
            tx.emit("RunFailed", error=tx.s.error)
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
            "NeedsAttention",
            step=step_id,
            code="compensation_input_error",
            reason=f"the compensation input of step {step_id} cannot be built: {exc}",
        )
        return
    base_key = tx.s.steps[step_id].idempotency_key or f"{tx.s.tenant}:{tx.s.run_id}:{step_id}"
    tx.emit(
        "CompensationScheduled",
        step=step_id,
        attempt=attempt,
        compensation=True,
        task_id=task_id(tx.s.run_id, step_id, "compensation", attempt),
        activity=comp.activity,
        input=payload,
        idempotency_key=f"{base_key}:compensate",
        delivery="idempotent",
        timeout_ms=int(comp.timeout.total_seconds() * 1000),
        queue=comp.queue,
        max_attempts=comp.retry.max_attempts,
    )


# --- activity attempts -----------------------------------------------------------------------------


def _claim(tx: _Tx, c: ClaimTask) -> None:
    a = tx.s.active
    if tx.s.terminal or a is None or a.task_id != c.task_id:
        raise Rejected("stale_task", f"task {c.task_id} is no longer wanted by run {tx.s.run_id}")
    if a.fencing is not None:
        raise Rejected("already_started", f"task {c.task_id} is already leased (fencing token {a.fencing})")
    tx.emit(
        "ActivityStarted",
        step=a.step,
        task_id=a.task_id,
        attempt=a.attempt,
        fencing=tx.s.seq + 1,
        worker=c.worker,
        deadline=c.deadline,
        compensation=a.kind == "compensation",
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


def _report(tx: _Tx, c: ReportSuccess | ReportFailure) -> None:
    stale = _stale_reason(tx.s, c.task_id, c.attempt, c.fencing)
    if stale is not None:
        result: dict[str, Any] = (
            {"outcome": "succeeded", "output": c.output}
            if isinstance(c, ReportSuccess)
            else {"outcome": "failed", "code": c.code, "message": c.message}
        )
        step = (
            tx.s.active.step if tx.s.active and tx.s.active.task_id == c.task_id else c.task_id.split("/")[-2]
        )
        tx.emit(
            "ResultIgnored",
            step=step,
            task_id=c.task_id,
            attempt=c.attempt,
            fencing=c.fencing,
            reason=stale,
            result=result,
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
            "ActivitySucceeded",
            step=a.step,
            task_id=a.task_id,
            attempt=a.attempt,
            fencing=c.fencing,
            output=c.output,
            compensation=comp,
            compensable=compensable and not comp,
        )
        _after_success(tx, a)
        return
    error = {"code": c.code, "message": c.message, "step": a.step, "attempt": a.attempt}
    unknown = a.delivery == "at_most_once" and c.unexpected and not comp
    _after_failure(tx, a, "ActivityFailed", error, c.retryable and not unknown, unknown)


def _after_success(tx: _Tx, a: Attempt) -> None:
    if a.kind == "compensation":
        _next_compensation(tx)
    elif tx.s.cancel is not None:
        _begin_cancel(tx)
    else:
        _advance_after(tx, a.step)


def _policy(tx: _Tx, a: Attempt) -> RetryPolicy:
    step = tx.d.step(a.step)
    if not isinstance(step, ActivityStep):  # pragma: no cover - only activity steps have attempts
        raise Rejected("corrupt", f"step {a.step} is not an activity")
    if a.kind == "compensation" and step.compensate is not None:
        return step.compensate.retry
    return step.retry


def _after_failure(
    tx: _Tx, a: Attempt, etype: str, error: dict[str, Any], retryable: bool, unknown: bool, **extra: Any
) -> None:
    """Shared by reported failures and timeouts: retry on a durable timer, escalate, or fail the step."""
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
    tx.emit(
        etype,
        step=a.step,
        task_id=a.task_id,
        attempt=a.attempt,
        activity=a.activity,
        error=error,
        will_retry=will_retry,
        outcome_unknown=unknown,
        compensation=comp,
        **extra,
    )
    if will_retry:
        delay = policy.delay(a.attempt)
        key = f"retry:{a.step}" + (":compensation" if comp else "")
        _timer(tx, key, "retry", a.step, tx.now + delay, attempt=a.attempt + 1, compensation=comp)
    elif unknown:
        tx.emit(
            "NeedsAttention",
            step=a.step,
            code="outcome_unknown",
            reason=f"at-most-once activity {a.activity} (step {a.step}, attempt {a.attempt}) may or may "
            f"not have taken effect ({error['code']}: {error['message']}); it will not be retried "
            f"blindly: check the downstream system, then resolve the step or cancel the run",
        )
    elif comp:
        tx.emit(
            "NeedsAttention",
            step=a.step,
            code="compensation_failed",
            reason=f"compensation {a.activity} of step {a.step} failed for good after {a.attempt} "
            f"attempt(s) ({error['code']}: {error['message']})",
        )
    elif cancelling:
        _begin_cancel(tx)
    else:
        _fail(tx, error)


def _expire(tx: _Tx, c: ExpireLease) -> None:
    a = tx.s.active
    if _stale_reason(tx.s, c.task_id, c.attempt, c.fencing) is not None or a is None:
        raise Rejected("stale_lease", f"task {c.task_id} attempt {c.attempt} is no longer in flight")
    error = {"code": "Timeout", "message": c.reason, "step": a.step, "attempt": a.attempt}
    unknown = a.delivery == "at_most_once" and a.kind == "action"
    _after_failure(tx, a, "ActivityTimedOut", error, True, unknown, reason=c.reason)


def _fire(tx: _Tx, c: FireTimer) -> None:
    t = tx.s.timers.get(c.key)
    if tx.s.terminal or t is None or t.generation != c.generation:
        raise Rejected("stale_timer", f"timer {c.key} generation {c.generation} is no longer armed")
    tx.emit("TimerFired", key=t.key, generation=t.generation, kind=t.kind, step=t.step, fire_at=t.fire_at)
    if t.kind == "wait":
        _advance_after(tx, t.step)
        return
    step = tx.d.step(t.step)
    if not isinstance(step, ActivityStep):  # pragma: no cover
        raise Rejected("corrupt", f"retry timer on non-activity step {t.step}")
    previous = tx.s.steps[t.step]
    if t.key.endswith(":compensation"):
        _next_compensation(tx, attempt=(previous.compensation or {}).get("attempts", 0) + 1)
    else:
        _schedule_action(tx, step, previous.attempts + 1)


def _cancel(tx: _Tx, c: CancelRun) -> None:
    s = tx.s
    if s.terminal:
        raise Rejected("terminal", f"the run is already {s.status}; there is nothing to cancel")
    if s.cancel is not None:
        return  # cancelling twice is the same request: no new events
    if s.compensating is not None:
        raise Rejected("compensating", "the run is already compensating after a failure and will end failed")
    tx.emit("CancelRequested", reason=c.reason, actor=c.actor)
    for t in sorted(tx.s.timers.values(), key=lambda t: t.key):
        tx.emit(
            "TimerCancelled",
            key=t.key,
            generation=t.generation,
            kind=t.kind,
            step=t.step,
            reason="run cancelled",
        )
    a = tx.s.active
    if a is not None and a.fencing is None:
        tx.emit(
            "ActivityCancelled",
            step=a.step,
            task_id=a.task_id,
            attempt=a.attempt,
            reason="run cancelled before any worker started it",
        )
        a = None
    if a is None:
        _begin_cancel(tx)
