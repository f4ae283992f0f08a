"""decide(state, command, now, definition) -> events: the whole behaviour of a run, as a pure function.

Each emitted event is folded immediately (evolve), so later decisions in the same command see it:
one command may pass through several instant steps (choice, fail, succeed) before it must wait.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import assert_never

from msgspec import UNSET

from .approval import (
    decide_approval,
    issue_link,
    on_approval_timeout,
    replace_approver,
    revoke_link,
)
from .attempt import claim, expire_lease, report
from .child import child_ended
from .commands import (
    CancelRun,
    ChildEnded,
    ClaimTask,
    Command,
    ConfirmRepair,
    DeadLetter,
    DecideApproval,
    DeliverEvent,
    EditInput,
    ExpireLease,
    FireTimer,
    IssueApprovalLink,
    IssueCallback,
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
)
from .events import (
    CancelRequested,
    Event,
    RunStarted,
    TimerFired,
)
from .flow import (
    Tx,
    advance_after,
    cancel_work,
    enter,
    expression_context,
    next_compensation,
    schedule_action,
    settle,
    task_id,
    timer,
)
from .foureyes import confirm_repair, needs_second_operator, propose_repair, reject_repair
from .limits import DEFAULT_SERVER_LIMITS, ServerLimits
from .migrate import migrate
from .paths import ROOT
from .repair import dead_letter, edit_input, pause, resolve, resume, retry_step, skip
from .state import RunState
from .timeutil import format_duration, parse_iso
from .waitevent import deliver, issue_callback, timed_out

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
            claim(tx, c)
        case ReportSuccess() | ReportFailure():
            report(tx, c)
        case ExpireLease():
            expire_lease(tx, c)
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
        case ChildEnded():
            child_ended(tx, c)
        case DeliverEvent():
            deliver(tx, c)
        case IssueCallback():
            issue_callback(tx, c)
        case _:
            assert_never(c)


# --- starting, timers and cancelling --------------------------------------------------------------


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
            trace=c.trace if c.trace is not None else UNSET,
            trace_parent=c.trace_parent if c.trace_parent is not None else UNSET,
            parent=c.parent if isinstance(c.parent, dict) else UNSET,
        )
    )
    if c.max_run_ms is not None:
        timer(tx, "deadline", "deadline", "(run)", now_plus(tx, c.max_run_ms))
    enter(tx, tx.d.steps[0].id)


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
    if t.kind == "event":
        timed_out(tx, t.step)
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
        attempt = (previous.compensation or {}).get("attempts", 0) + 1
        next_compensation(tx, attempt=attempt, step=t.step)
    else:
        schedule_action(tx, step, previous.attempts + 1, at=t.step)


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
    # Timers, approval requests and attempts nobody started, in every lane; attempts in flight report
    # first (their lanes finish then), and the run compensates once nothing of it is in flight.
    cancel_work(tx, ROOT, "run cancelled")
    settle(tx)
