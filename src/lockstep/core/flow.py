"""How a run moves through its steps: entering steps, scheduling attempts and timers, running the
lanes of parallel and for-each steps, failing and compensating. Shared by the command handlers
(decide.py and the command families beside it); pure like the rest of the core. The transaction `Tx` and
the small moves every handler makes on it are in tx.py, compensation in compensate.py and the joins of
shape steps in join.py; all are re-exported here, so a handler imports its whole vocabulary from one
place.

Every move takes a step *key* (core/paths.py): a top-level step's id, or a nested step's lanes and id.
A lane is entered, advanced and ended like the run itself; the end of a lane (its last step, `next: end`,
a succeed or a failure) finishes it, and its shape step's join says what follows."""

from __future__ import annotations

from typing import Any

from msgspec import UNSET

from . import starts
from .compensate import begin_cancel, fail_run, next_compensation
from .definition import (
    ActivityStep,
    ApprovalStep,
    ChoiceStep,
    FailStep,
    ForEachStep,
    ParallelStep,
    RunStep,
    SucceedStep,
    WaitEventStep,
    WaitStep,
)
from .events import (
    LaneFinished,
    RunCompleted,
    StepFailed,
    StepJoined,
)
from .expr import ExprError
from .join import (
    cancel_work,
    decided_event,
    group_output,
    open_for_each,
    open_parallel,
    settled_lanes,
    start_lane,
    this_visit,
    verdict,
    winding_down,
)
from .lanes import attempts, attentions, children_in, last_output_of
from .paths import ROOT, branch_lane, lane_of, lane_step, qualify
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
from .waitstart import start_wait

__all__ = [
    "Tx",
    "advance_after",
    "begin_cancel",
    "cancel_timers",
    "cancel_work",
    "complete",
    "continue_run",
    "defer",
    "enter",
    "expression_context",
    "fail",
    "next_compensation",
    "progress",
    "queued_attempt",
    "request_approval",
    "resume_deferred",
    "run_of_task",
    "schedule_action",
    "settle",
    "step_failed",
    "task_id",
    "timer",
    "winding_down",
    "withdraw",
]


def resume_deferred(tx: Tx, action: str, args: dict[str, Any]) -> None:
    """Carry out one deferred transition (see defer). One held back in a lane that has finished since,
    or is being cancelled, is dropped: an earlier transition on resume decided its shape step's join."""
    step = args.get("step")
    lane = (
        lane_of(step) if isinstance(step, str) and action != "next_compensation" else args.get("lane", ROOT)
    )
    if lane and action != "next_compensation":
        ln = tx.s.lanes.get(lane)
        if ln is None or not ln.open or winding_down(tx.s, lane):
            return
    if action == "enter":
        enter(tx, args["step"], args.get("lane", ROOT))
    elif action == "schedule_action":
        step = tx.d.step(args["step"])
        if isinstance(step, ActivityStep):
            key_suffix, key = args.get("key_suffix", ""), args.get("key")
            schedule_action(tx, step, args["attempt"], key_suffix, key, at=args["step"])
    elif action == "next_compensation":
        next_compensation(tx, args["attempt"], args.get("step"))
    elif action == "fail":
        fail(tx, args["error"], args.get("lane", ROOT))


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


def enter(tx: Tx, key: str | None, lane: str = ROOT) -> None:
    """Enter steps of one lane until one must wait (an activity, a timer, an approval, a shape step's
    lanes) or the lane ends (`key` None: its end; the run's, for the top-level lane)."""
    if key is not None:
        lane = lane_of(key)
    if defer(tx, "enter", **({"step": key, "lane": lane} if lane else {"step": key})):
        return
    while True:
        if key is None:
            complete(tx, None, lane)
            return
        step = tx.d.step(key)
        ctx = expression_context(tx.s, lane)
        if isinstance(step, ActivityStep):
            schedule_action(tx, step, 1, at=key)
            return
        if isinstance(step, WaitStep):
            schedule_wait(tx, key, step, ctx)
            return
        if isinstance(step, FailStep):
            try:
                message = step.message.render(ctx)
            except ExprError as exc:
                message = f"(message could not be rendered: {exc})"
            step_failed(tx, key, {"code": step.error, "message": str(message), "step": key})
            return
        if isinstance(step, SucceedStep):
            complete(tx, step, lane)
            return
        if isinstance(step, ApprovalStep):
            request_approval(tx, step, ctx, key)
            return
        if isinstance(step, ParallelStep):
            start_parallel(tx, key, step)
            return
        if isinstance(step, ForEachStep):
            start_for_each(tx, key, step, ctx)
            return
        if isinstance(step, RunStep):
            error = starts.child(tx, key, step, ctx)
            if error is not None:
                step_failed(tx, key, error)
            return
        if isinstance(step, WaitEventStep):
            error = start_wait(tx, key, step, ctx)
            if error is not None:
                step_failed(tx, key, error)
            return
        if not isinstance(step, ChoiceStep):  # pragma: no cover - every kind is handled above
            raise TypeError(f"step {key} of kind {step.kind}")
        target = _choose(tx, key, step, ctx)
        if target is None:
            return
        key = None if target == "end" else qualify(lane, target)


def _choose(tx: Tx, key: str, step: ChoiceStep, ctx: dict[str, Any]) -> str | None:
    target, error = starts.choose(tx, key, step, ctx)
    if error is not None:
        step_failed(tx, key, error)
    return target


def advance_after(tx: Tx, key: str) -> None:
    lane = lane_of(key)
    nxt = tx.d.following(key)
    enter(tx, qualify(lane, nxt) if nxt is not None else None, lane)


def complete(tx: Tx, succeed: SucceedStep | None, lane: str = ROOT) -> None:
    """The end of a lane: the run completes (the top-level lane), or the branch or item succeeds, with
    the succeed step's output, else (the run's `output` template, else) the last step's output."""
    ctx = expression_context(tx.s, lane)
    template = succeed.output if succeed is not None and succeed.output is not None else None
    if template is None and not lane:
        template = tx.d.output
    try:
        if template is not None:
            output = template.render(ctx)
        else:
            last = last_output_of(tx.s, lane)
            output = tx.s.steps[last].output if last is not None else None
    except ExprError as exc:
        where = qualify(lane, succeed.id) if succeed else (tx.s.current_step or "output")
        step_failed(tx, where, {"code": "ExpressionError", "message": f"run output: {exc}", "step": None})
        return
    if lane:
        finish_lane(tx, lane, "succeeded", output=output)
    else:
        tx.emit(RunCompleted(output=output))


def schedule_action(
    tx: Tx,
    step: ActivityStep,
    attempt: int,
    key_suffix: str = "",
    key: str | None = None,
    at: str | None = None,
) -> None:
    """`key`: the idempotency key to reuse (an operator's retry of the same effect), else computed;
    `at`: the step's key (a nested step's lanes and id), else its id."""
    at = at or step.id
    extra = {"key": key} if key is not None else {}
    if defer(tx, "schedule_action", step=at, attempt=attempt, key_suffix=key_suffix, **extra):
        return
    error = starts.activity(tx, step, attempt, key_suffix, key, at)
    if error is not None:
        step_failed(tx, at, error)


def schedule_wait(tx: Tx, key: str, step: WaitStep, ctx: dict[str, Any]) -> None:
    error = starts.wait(tx, key, step, ctx)
    if error is not None:
        step_failed(tx, key, error)


def request_approval(tx: Tx, step: ApprovalStep, ctx: dict[str, Any], key: str | None = None) -> None:
    """Enter an approval step: record the request with its policy and arm the durable timeout."""
    error = starts.approval(tx, step, ctx, key or step.id)
    if error is not None:
        step_failed(tx, key or step.id, error)


# --- parallel and for-each steps --------------------------------------------------------------------


def start_parallel(tx: Tx, key: str, step: ParallelStep) -> None:
    """Open every branch and enter its first step (one may end at once, and decide the join)."""
    open_parallel(tx, key, step)
    visit = tx.s.groups[key].started_seq
    for i, b in enumerate(step.branches):
        g = tx.s.groups.get(key)
        if g is None or g.started_seq != visit or g.outcome is not None:
            return  # the join was decided before every branch began: the rest never start
        lane = branch_lane(key, b.id)
        start_lane(tx, key, lane, i)
        enter(tx, qualify(lane, b.steps[0].id))


def start_for_each(tx: Tx, key: str, step: ForEachStep, ctx: dict[str, Any]) -> None:
    items, error = starts.for_each_items(key, step, ctx)
    if error is not None:
        step_failed(tx, key, error)
        return
    open_for_each(tx, key, step, items)
    progress(tx, key)


def progress(tx: Tx, key: str) -> None:
    """Carry out what shape step `key`'s join says now: start items, decide (once per visit: the lanes
    still open are then cancelled), and end the step when its lanes are all over. A shape step in a lane
    that is itself being cancelled only winds down."""
    while True:
        g, st = tx.s.groups.get(key), tx.s.steps.get(key)
        if g is None or st is None or st.status != "running" or winding_down(tx.s, lane_of(key)):
            return
        v = verdict(tx.s, key)
        if v.decide is not None:
            event = decided_event(key, tx.s, v.decide)
            tx.emit(event)
            for lid in event.cancelling:
                cancel_work(tx, lid, f"the join of step {key} was decided ({event.reason})")
            settle(tx)
            continue
        if v.finish:
            _finish_step(tx, key)
            return
        if not v.start:
            return
        lane, index = v.start[0]
        start_lane(tx, key, lane, index)
        enter(tx, qualify(lane, tx.d.first(key)))


def _finish_step(tx: Tx, key: str) -> None:
    g = tx.s.groups[key]
    if g.outcome == "failed":
        step_failed(tx, key, g.error or {"code": "Failed", "message": f"step {key} failed", "step": key})
        return
    statuses = [ln.status for _, ln in this_visit(tx.s, key)]
    tx.emit(
        StepJoined(
            step=key,
            output=group_output(tx.s, key),
            succeeded=statuses.count("succeeded"),
            failed=statuses.count("failed"),
            cancelled=statuses.count("cancelled"),
        )
    )
    advance_after(tx, key)


def finish_lane(
    tx: Tx, lane: str, outcome: str, output: Any = None, error: Any = None, reason: str | None = None
) -> None:
    key = lane_step(lane)
    tx.emit(
        LaneFinished(
            step=key,
            lane=lane,
            outcome=outcome,
            output=output,
            error=error,
            reason=reason if reason is not None else UNSET,
        )
    )
    progress(tx, key)


def settle(tx: Tx) -> None:
    """After work was cancelled or reported: lanes being cancelled with nothing left in flight finish
    (cancelled), and a cancelled run compensates (or ends) once nothing of it is in flight."""
    for lid in settled_lanes(tx.s):
        ln = tx.s.lanes.get(lid)
        if ln is not None and ln.open:
            why = "run cancelled" if tx.s.cancel is not None else "the join of its step was decided"
            finish_lane(tx, lid, "cancelled", reason=why)
    s = tx.s
    if (
        s.cancel is not None
        and not s.terminal
        and s.compensating is None
        and not any(True for _ in attempts(s))
        and not attentions(s)
        and not children_in(s)  # a child being cancelled reports its end first, as an attempt does
    ):
        begin_cancel(tx)


# --- failure ----------------------------------------------------------------------------------------


def step_failed(tx: Tx, key: str, error: dict[str, Any]) -> None:
    tx.emit(StepFailed(step=key, error=error))
    fail(tx, error, lane_of(key))


def fail(tx: Tx, error: dict[str, Any], lane: str = ROOT) -> None:
    """A step failed for good: its branch or item fails (its shape step's join says what follows), or,
    in the top-level lane, the run compensates completed steps in reverse order, then ends failed."""
    if defer(tx, "fail", **({"error": error, "lane": lane} if lane else {"error": error})):
        return
    if lane:
        finish_lane(tx, lane, "failed", error=error)
    else:
        fail_run(tx, error)
