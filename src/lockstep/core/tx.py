"""Tx, the transaction of one command: it accumulates the events a handler emits, folding each one so
the next decision sees the updated state. Beside it, what every handler uses: the deterministic ids, the
context expressions are evaluated in, and the small moves on a run (arm or cancel timers, withdraw an
attempt, hold a transition back while the run is paused). Pure like the rest of the core."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .commands import Rejected
from .definition import Definition
from .events import (
    UNSET,
    ActivityCancelled,
    Event,
    EventData,
    TimerCancelled,
    TimerScheduled,
    TransitionDeferred,
    UnsetType,
)
from .evolve import evolve
from .lanes import attempt_of_task
from .limits import DEFAULT_SERVER_LIMITS, ServerLimits
from .paths import ROOT, is_item_lane, lane_of, lane_step, step_id, within
from .state import Attempt, RunState
from .timeutil import iso

__all__ = [
    "Tx",
    "cancel_timers",
    "defer",
    "expression_context",
    "queued_attempt",
    "run_of_task",
    "task_id",
    "timer",
    "withdraw",
]


def task_id(run_id: str, step: str, kind: str, attempt: int, seq: int) -> str:
    """Deterministic and unique per run: the seq of the scheduling event tells apart two passes through
    the same step (a polling loop) that both start at attempt 1."""
    return f"{run_id}/{step}/{'c' if kind == 'compensation' else 'a'}{attempt}-{seq}"


def run_of_task(task: str) -> str:
    """The run id a task id begins with (see task_id): lets a batch lock the runs before reading tasks."""
    return task.split("/", 1)[0]


def expression_context(state: RunState, lane: str = ROOT) -> dict[str, Any]:
    """What expressions of a step in `lane` see: the input, the run, and the steps of that lane and of
    the lanes around it, by their ids (never a sibling branch's or another item's); inside a for-each
    body also `item` and `index` (of the innermost for-each)."""
    if not state.lanes:
        steps = {
            sid: {"output": st.output, "status": st.status, "attempts": st.attempts}
            for sid, st in state.steps.items()
        }
    else:
        steps = {
            step_id(key): {"output": st.output, "status": st.status, "attempts": st.attempts}
            for key, st in state.steps.items()
            if within(lane, lane_of(key))
        }
    ctx: dict[str, Any] = {
        "input": state.input,
        "steps": steps,
        "run": {
            "id": state.run_id,
            "tenant": state.tenant,
            "definition": state.definition["name"],
            "version": state.definition["version"],
            "started_at": state.started_at,
        },
    }
    around = lane
    while around:
        if is_item_lane(around):
            group, ln = state.groups.get(lane_step(around)), state.lanes.get(around)
            if group is not None and ln is not None and isinstance(group.items, list):
                ctx["item"], ctx["index"] = group.items[ln.index], ln.index
            break
        around = lane_of(lane_step(around))
    return ctx


class Tx:
    """Accumulates events, folding each one so the next decision sees the updated state."""

    def __init__(
        self,
        state: RunState | None,
        now: datetime,
        definition: Definition,
        limits: ServerLimits = DEFAULT_SERVER_LIMITS,
    ) -> None:
        self.state = state
        self.now = now
        self.at = iso(now)
        self.d = definition
        self.limits = limits  # the server's history limits (bounds on events people can repeat)
        self.events: list[Event] = []

    @property
    def s(self) -> RunState:
        if self.state is None:
            raise Rejected("no_run", "the run does not exist")
        return self.state

    def emit(self, data: EventData) -> None:
        seq = (self.state.seq if self.state else 0) + 1
        e = Event(data, self.at, seq)
        self.state = evolve(self.state, e)
        self.events.append(e)


def defer(tx: Tx, action: str, **args: Any) -> bool:
    """While a run is paused, a transition that would start work is recorded (TransitionDeferred) and
    carried out by RunResumed instead. Returns True if deferred."""
    if tx.s.paused is None:
        return False
    tx.emit(TransitionDeferred(action=action, args=args))
    return True


def queued_attempt(tx: Tx, task: str) -> Attempt:
    """The run's current attempt for `task`, which no worker may have started yet; else Rejected."""
    a = attempt_of_task(tx.s, task)
    if tx.s.terminal or a is None:
        raise Rejected("stale_task", f"task {task} is no longer wanted by run {tx.s.run_id}")
    if a.fencing is not None:
        raise Rejected(
            "already_started", f"task {task} was already taken by {a.worker} (fencing token {a.fencing})"
        )
    return a


def withdraw(tx: Tx, a: Attempt, reason: str, rescheduled: bool = False) -> None:
    """Record that an attempt is no longer wanted (ActivityCancelled); its task row is closed.
    `rescheduled`: a pause withdraws it, to schedule it again on resume."""
    if rescheduled:
        comp = a.kind == "compensation"
        tx.emit(
            ActivityCancelled(
                step=a.step,
                task_id=a.task_id,
                attempt=a.attempt,
                reason=reason,
                rescheduled=True,
                compensation=comp,
            )
        )
    else:
        tx.emit(ActivityCancelled(step=a.step, task_id=a.task_id, attempt=a.attempt, reason=reason))


def timer(
    tx: Tx,
    key: str,
    kind: str,
    step: str,
    fire_at: datetime,
    attempt: int | UnsetType = UNSET,
    compensation: bool | UnsetType = UNSET,
) -> None:
    """Arm a durable timer; a retry timer (only) records the attempt it starts and whose it is."""
    generation = tx.s.seq + 1  # the seq of the TimerScheduled event: unique and increasing per run
    tx.emit(
        TimerScheduled(
            key=key,
            generation=generation,
            kind=kind,
            step=step,
            fire_at=iso(fire_at),
            attempt=attempt,
            compensation=compensation,
        )
    )


def cancel_timers(tx: Tx, reason: str, step: str | None = None, inside: str | None = None) -> None:
    """Make the run's armed timers stale (only those of `step`, or of the steps of lane `inside` and
    the lanes within it, when given), in a stable order."""
    for t in sorted(tx.s.timers.values(), key=lambda t: t.key):
        if inside is not None and (t.kind == "deadline" or not within(lane_of(t.step), inside)):
            continue
        if step is None or t.step == step:
            tx.emit(
                TimerCancelled(key=t.key, generation=t.generation, kind=t.kind, step=t.step, reason=reason)
            )
