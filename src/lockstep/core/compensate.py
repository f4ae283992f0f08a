"""Compensation: undo the completed steps of a run that failed or was cancelled, in reverse order.

`RunState.completed` lists compensable steps as they completed; CompensationStarted records them
reversed, and `compensating` is what is left. A step's compensation may run once every step that
completed after it *in the same lane, or in a lane around or inside it* has been compensated; steps of
lanes side by side (two branches of a parallel step, two items of a for-each) do not wait for each
other. So each branch compensates in reverse order, branches in parallel (a for-each's items at most
its concurrency at a time), and the steps before and after a shape step wait for all of it. A run
without shapes has one lane: one compensation at a time, as before. Pure like the rest of the core.
"""

from __future__ import annotations

from typing import Any

from .commands import Rejected
from .definition import ActivityStep
from .events import CompensationScheduled, CompensationStarted, NeedsAttention, RunCancelled, RunFailed
from .expr import ExprError
from .lanes import active_of, attention_of
from .paths import ROOT, is_item_lane, lane_of, lane_step
from .state import RunState
from .tx import Tx, defer, expression_context, task_id

__all__ = ["begin_cancel", "fail_run", "next_compensation", "ready_compensations"]


def fail_run(tx: Tx, error: dict[str, Any]) -> None:
    """The run failed for good: compensate completed steps in reverse order, then end failed."""
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


def next_compensation(tx: Tx, attempt: int = 1, step: str | None = None) -> None:
    """Schedule the compensations that may run now (only `step`'s, with `attempt`, when given: its
    retry); end the run when none is left."""
    args: dict[str, Any] = {"attempt": attempt}
    if step is not None and tx.s.lanes:  # a run without shapes records what it always did
        args["step"] = step
    if defer(tx, "next_compensation", **args):
        return
    remaining = tx.s.compensating or ()
    if not remaining:
        if tx.s.compensation_cause == "cancelled":
            tx.emit(RunCancelled(reason=(tx.s.cancel or {}).get("reason")))
        else:
            tx.emit(RunFailed(error=tx.s.error))
        return
    for key in ready_compensations(tx.s):
        if step is None or key == step:
            _schedule(tx, key, attempt)


def _in_progress(s: RunState, key: str) -> bool:
    lane = lane_of(key)
    a = active_of(s, lane)
    if a is not None and a.step == key and a.kind == "compensation":
        return True
    att = attention_of(s, lane)
    return f"retry:{key}:compensation" in s.timers or (att is not None and att["step"] == key)


def _chain(lane: str) -> list[str]:
    """`lane` and the lanes around it, innermost first."""
    out = []
    while lane:
        out.append(lane)
        lane = lane_of(lane_step(lane))
    return out


def ready_compensations(s: RunState) -> list[str]:
    """The steps of `compensating` whose compensation may start now, in order (see the module doc)."""
    remaining = s.compensating or ()
    if not s.lanes:  # one lane: the head, unless it is already under way
        return [remaining[0]] if remaining and not _in_progress(s, remaining[0]) else []
    seen: set[str] = set()  # lanes of the steps before in the list
    around_seen: set[str] = set()  # those lanes and every lane around them
    busy: dict[str, set[str]] = {}  # for-each step -> its items compensating now
    for key in remaining:
        if _in_progress(s, key):
            for ln in _chain(lane_of(key)):
                if is_item_lane(ln):
                    busy.setdefault(lane_step(ln), set()).add(ln)
    out: list[str] = []
    for key in remaining:
        lane = lane_of(key)
        chain = _chain(lane)
        blocked = (lane == ROOT and bool(seen)) or lane in around_seen or any(x in seen for x in chain)
        if not blocked and not _in_progress(s, key) and not _over_concurrency(s, chain, busy):
            out.append(key)
            for ln in chain:
                if is_item_lane(ln):
                    busy.setdefault(lane_step(ln), set()).add(ln)
        if lane == ROOT:
            break  # a top-level step waits for everything before it, and everything after waits for it
        seen.add(lane)
        around_seen.update(chain)
    return out


def _over_concurrency(s: RunState, chain: list[str], busy: dict[str, set[str]]) -> bool:
    """A for-each compensates at most `concurrency` of its items at a time."""
    for ln in chain:
        if is_item_lane(ln):
            key = lane_step(ln)
            g = s.groups.get(key)
            now = busy.get(key, set())
            if g is not None and ln not in now and len(now) >= g.concurrency:
                return True
    return False


def _schedule(tx: Tx, step_key: str, attempt: int) -> None:
    step = tx.d.step(step_key)
    if not isinstance(step, ActivityStep) or step.compensate is None:  # pragma: no cover - only these enter
        raise Rejected("corrupt", f"step {step_key} has no compensation")
    comp = step.compensate
    ctx = expression_context(tx.s, lane_of(step_key))
    try:
        payload = comp.input.render(ctx)
    except ExprError as exc:
        tx.emit(
            NeedsAttention(
                step=step_key,
                code="compensation_input_error",
                reason=f"the compensation input of step {step_key} cannot be built: {exc}",
            )
        )
        return
    base_key = tx.s.steps[step_key].idempotency_key or f"{tx.s.tenant}:{tx.s.run_id}:{step_key}"
    tx.emit(
        CompensationScheduled(
            step=step_key,
            attempt=attempt,
            compensation=True,
            task_id=task_id(tx.s.run_id, step_key, "compensation", attempt, tx.s.seq + 1),
            activity=comp.activity,
            input=payload,
            idempotency_key=f"{base_key}:compensate",
            delivery="idempotent",
            timeout_ms=int(comp.timeout.total_seconds() * 1000),
            queue=comp.queue,
            max_attempts=comp.retry.max_attempts,
        )
    )
