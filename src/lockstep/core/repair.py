"""Operator commands on a run (dead letters and retries so far; pause, skip, resolve, edit-input and
migrate join them): each is a state-machine command with a reason and an audit event."""

from __future__ import annotations

from .canonical import JSONObject
from .commands import DeadLetter, EditInput, PauseRun, Rejected, ResolveStep, ResumeRun, RetryStep, SkipStep
from .definition import ActivityStep, DefinitionError
from .events import (
    ActivityDeadLettered,
    InputEdited,
    NeedsAttention,
    RunPaused,
    RunResumed,
    StepResolved,
    StepRetried,
    StepSkipped,
)
from .flow import (
    Tx,
    advance_after,
    cancel_timers,
    defer,
    fail,
    next_compensation,
    queued_attempt,
    resume_deferred,
    schedule_action,
    settle,
    winding_down,
    withdraw,
)
from .lanes import active_of, approval_of, approvals, attempts, attention_of, current_of
from .paths import lane_of, step_id
from .state import RunState

__all__ = [
    "dead_letter",
    "edit_input",
    "granted_approvals",
    "pause",
    "resolve",
    "resume",
    "retry_step",
    "skip",
]

RETRYABLE_ATTENTION = ("dead_letter", "outcome_unknown", "compensation_failed")


def dead_letter(tx: Tx, c: DeadLetter) -> None:
    a = queued_attempt(tx, c.task_id)
    tx.emit(
        ActivityDeadLettered(
            step=a.step,
            task_id=a.task_id,
            attempt=a.attempt,
            activity=a.activity,
            reason=c.reason,
            compensation=a.kind == "compensation",
        )
    )
    tx.emit(
        NeedsAttention(
            step=a.step,
            code="dead_letter",
            reason=f"task of {a.activity} (step {a.step}, attempt {a.attempt}) went to the dead-letter "
            f"state: {c.reason}",
        )
    )


def retry_step(tx: Tx, c: RetryStep) -> None:
    s = tx.s
    att = attention_of(s, lane_of(c.step)) or s.attention
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
        StepRetried(
            step=c.step,
            reason=c.reason,
            actor=c.actor,
            new_key=c.new_key,
            code=att["code"],
            attempt=attempt,
            compensation=comp,
            superseded=_held(s),
        )
    )
    if comp:
        next_compensation(tx, attempt=attempt, step=c.step)
    elif c.new_key:
        schedule_action(tx, step, attempt, key_suffix=f"~retry{tx.s.seq}", at=c.step)
    else:
        # The same effect again: the key it was attempted with, even if a migration renamed the step
        # (a default key names the step) since.
        schedule_action(tx, step, attempt, key=prev.idempotency_key, at=c.step)


# --- pause and resume --------------------------------------------------------------------------------


def pause(tx: Tx, c: PauseRun) -> None:
    s = tx.s
    _check_open(s, c.reason, "pause")
    if s.paused is not None:
        raise Rejected("already_paused", f"the run is already paused since {s.paused['at']}")
    if s.cancel is not None or s.compensating is not None:
        raise Rejected("not_pausable", "the run is being cancelled or compensated; let it finish")
    tx.emit(RunPaused(reason=c.reason, actor=c.actor))
    for a in list(attempts(tx.s)):
        if a.fencing is None:
            # Nobody started this attempt yet: withdraw it now and schedule it again on resume.
            withdraw(tx, a, "run paused; scheduled again on resume", rescheduled=True)
            if a.kind == "compensation":
                step = {"step": a.step} if tx.s.lanes else {}
                defer(tx, "next_compensation", attempt=a.attempt, **step)
            else:
                defer(tx, "schedule_action", step=a.step, attempt=a.attempt, key_suffix="")


def resume(tx: Tx, c: ResumeRun) -> None:
    s = tx.s
    _check_open(s, c.reason, "resume")
    if s.paused is None:
        raise Rejected("not_paused", "the run is not paused")
    deferred = list(s.paused["deferred"])
    tx.emit(RunResumed(reason=c.reason, actor=c.actor, deferred=deferred))
    for d in deferred:
        resume_deferred(tx, d["action"], d["args"])


def _held(s: RunState) -> list[JSONObject]:
    """Transitions held back by a pause that a repair replaces (recorded in its event, for the audit)."""
    return list(s.paused["deferred"]) if s.paused is not None else []


def _check_open(s: RunState, reason: str, what: str) -> None:
    if s.terminal:
        raise Rejected("terminal", f"the run is already {s.status}; there is nothing to {what}")
    if not reason.strip():
        raise Rejected("reason_required", f"{what} needs a reason")


# --- skip, edit input, resolve -----------------------------------------------------------------------


def skip(tx: Tx, c: SkipStep) -> None:
    s = tx.s
    _check_open(s, c.reason, "skip")
    lane = lane_of(c.step)
    att = attention_of(s, lane)
    here = current_of(s, lane) if att is None else att["step"]
    if c.step != here:
        where = f"of lane {lane} " if lane else ""
        raise Rejected(
            "not_current",
            f"step {c.step} is not the current step {where}({here or 'none'}); only the current step can "
            "be skipped",
        )
    pending = approval_of(s, lane)
    if pending is not None and pending["step"] == c.step:
        raise Rejected(
            "approval_pending",
            f"step {c.step} waits for approval request {pending['request_id']}; a pending approval ends "
            f"only by its policy (quorum, rejection, timeout) or by cancelling the run, never by a skip",
        )
    if c.step in s.children:
        child = s.children[c.step]["child_run_id"]
        raise Rejected(
            "child_running",
            f"step {c.step} waits for child run {child}; cancel this run (the child is cancelled with it), "
            "or cancel the child run: its end reaches this step",
        )
    if c.step in s.event_waits:
        w = s.event_waits[c.step]
        raise Rejected(
            "event_waiting",
            f"step {c.step} waits for event {w['name']} (key {w['key']}); deliver it "
            "(`lockstep event send`), let its timeout apply, or cancel the run",
        )
    roles = tx.d.skip_roles.get(step_id(c.step))
    if roles is None:
        raise Rejected(
            "not_skippable",
            f"step {c.step} may not be skipped (the definition does not mark it "
            f"skippable); cancel the run to compensate instead",
        )
    if not set(c.roles) & set(roles):
        raise Rejected("forbidden", f"only {', '.join(roles)} may skip step {c.step}")
    if s.compensating is not None or winding_down(s, lane):
        raise Rejected("not_skippable", "the run (or this branch) is being cancelled or compensated")
    a = active_of(s, lane)
    if a is not None and a.step == c.step:
        if a.fencing is not None:
            raise Rejected(
                "in_flight",
                f"attempt {a.attempt} of step {c.step} is running on {a.worker}; wait for "
                f"its result (or cancel the run) before skipping",
            )
        withdraw(tx, a, "step skipped")
    cancel_timers(tx, "step skipped", c.step)
    before = s.steps[c.step]
    tx.emit(
        StepSkipped(
            step=c.step,
            output=c.output,
            reason=c.reason,
            actor=c.actor,
            before={"status": before.status, "attempts": before.attempts, "output": before.output},
            superseded=_held(s),
        )
    )
    advance_after(tx, c.step)


def edit_input(tx: Tx, c: EditInput) -> None:
    """Refused while an approval is pending and once one was granted: approvers decided on details
    rendered from the input as it was, so a new input would run later steps on what nobody approved.
    (Cancel the run and start a new one: it asks for approval again, with the new details.)"""
    s = tx.s
    _check_open(s, c.reason, "edit the input of")
    pending = approvals(s)
    if pending:
        raise Rejected(
            "approval_pending",
            f"the run waits for approval request {pending[0]['request_id']}, whose approvers see details "
            f"rendered from the current input; the input cannot change under them (cancel the run and "
            f"start a new one with the new input)",
        )
    granted = granted_approvals(s)
    if granted:
        raise Rejected(
            "approved_input",
            f"approval {', '.join(granted)} was granted on details rendered from the current input; "
            f"changing it now would run the remaining steps on an input nobody approved (cancel the run "
            f"and start a new one with the new input)",
        )
    try:
        tx.d.check_input(c.input)
    except DefinitionError as exc:
        raise Rejected("invalid_input", str(exc)) from None
    tx.emit(InputEdited(old=s.input, new=c.input, reason=c.reason, actor=c.actor))


def granted_approvals(s: RunState) -> list[str]:
    """Request ids of this run's granted approvals (the outputs of its approval steps say so)."""
    out = []
    for st in s.steps.values():
        o = st.output
        if isinstance(o, dict) and o.get("outcome") == "approved" and "request_id" in o:
            out.append(str(o["request_id"]))
    return sorted(out)


def resolve(tx: Tx, c: ResolveStep) -> None:
    s = tx.s
    _check_open(s, c.reason, "resolve")
    lane = lane_of(c.step)
    att = attention_of(s, lane)
    if (
        att is None
        or att["step"] != c.step
        or att["code"] not in ("outcome_unknown", "dead_letter", "compensation_failed")
    ):
        raise Rejected("not_resolvable", f"step {c.step} has no unknown or stuck outcome to settle")
    if c.outcome not in ("succeeded", "failed"):
        raise Rejected("invalid_outcome", "resolve --as succeeded or --as failed")
    comp = att["code"] == "compensation_failed"
    if comp and c.outcome == "failed":
        raise Rejected(
            "invalid_outcome",
            "a failed compensation can only be resolved as succeeded (undone by hand); otherwise retry it",
        )
    step = tx.d.step(c.step)
    compensable = isinstance(step, ActivityStep) and step.compensate is not None and not comp
    tx.emit(
        StepResolved(
            step=c.step,
            outcome=c.outcome,
            output=c.output,
            reason=c.reason,
            actor=c.actor,
            code=att["code"],
            compensation=comp,
            compensable=compensable and c.outcome == "succeeded",
            superseded=_held(s),
        )
    )
    if comp:
        next_compensation(tx)
    elif winding_down(tx.s, lane):
        settle(tx)
    elif c.outcome == "succeeded":
        advance_after(tx, c.step)
    else:
        fail(
            tx,
            {
                "code": "ResolvedFailed",
                "message": f"resolved as failed by {c.actor or 'an operator'}: {c.reason}",
                "step": c.step,
            },
            lane,
        )
