"""The `wait_event` step: waiting for an external event, receiving it, timing out, being cancelled,
and the callbacks minted for a wait. Pure: the application layer finds the waiting runs (the waits
index), draws callback tokens, checks signatures; here only what the run's state says is decided.

A wait is identified by its step key and its generation (the seq of its EventWaitStarted): a delivery
or a callback names both, so one meant for an earlier visit of the step (the run moved on, a loop came
back to it) is refused as stale and changes nothing."""

from __future__ import annotations

from typing import Any

from .commands import DeliverEvent, IssueCallback, Rejected
from .definition import WaitEventStep
from .events import CallbackIssued, EventReceived, EventWaitTimedOut
from .flow import advance_after, enter, fail, settle
from .join import winding_down
from .paths import lane_of, qualify
from .tx import Tx, cancel_timers
from .waitstart import payload_problems

__all__ = ["MAX_CALLBACKS_PER_WAIT", "deliver", "issue_callback", "timed_out"]

# Callbacks minted for one wait (each mint replaces the one before): as approval links per approver.
MAX_CALLBACKS_PER_WAIT = 5


def _wait_of(tx: Tx, step: str, generation: int) -> dict[str, Any]:
    s = tx.s
    wait = s.event_waits.get(step)
    if s.terminal or wait is None:
        raise Rejected("stale_wait", f"run {s.run_id} does not wait for an event at step {step}")
    if wait["generation"] != generation:
        raise Rejected(
            "stale_wait",
            f"run {s.run_id} moved on: step {step} now waits as generation {wait['generation']}, "
            f"not {generation}",
        )
    return wait


def deliver(tx: Tx, c: DeliverEvent) -> None:
    wait = _wait_of(tx, c.step, c.generation)
    if (c.name, c.key) != (wait["name"], wait["key"]):
        raise Rejected(
            "not_awaited",
            f"step {c.step} waits for {wait['name']} (key {wait['key']}), not {c.name} (key {c.key})",
        )
    if c.via == "callback" and (
        not wait.get("token_hash")
        or c.token_hash != wait["token_hash"]
        or c.callback_id != wait.get("callback_id")
    ):
        raise Rejected("stale_callback", f"callback {c.callback_id} is not the current one of step {c.step}")
    step = tx.d.step(c.step)
    if not isinstance(step, WaitEventStep):  # pragma: no cover - the wait was started by this kind
        raise Rejected("corrupt", f"event wait on step {c.step} of kind {step.kind}")
    problems = payload_problems(step, c.payload)
    if problems:
        raise Rejected(
            "payload_invalid",
            f"the payload does not match the schema of step {c.step}: " + "; ".join(problems),
        )
    tx.emit(
        EventReceived(
            step=c.step,
            generation=c.generation,
            event_id=c.event_id,
            name=c.name,
            key=c.key,
            payload=c.payload,
            via=c.via,
            callback_id=c.callback_id,
        )
    )
    cancel_timers(tx, "event received", c.step)
    if winding_down(tx.s, lane_of(c.step)):  # pragma: no cover - a cancelled lane's wait is cancelled
        settle(tx)
    else:
        advance_after(tx, c.step)


def issue_callback(tx: Tx, c: IssueCallback) -> None:
    wait = _wait_of(tx, c.step, c.generation)
    if not wait.get("callback"):
        raise Rejected("no_callback", f"step {c.step} does not take a callback (callback: true is not set)")
    if len(wait.get("issued") or ()) >= MAX_CALLBACKS_PER_WAIT:
        raise Rejected(
            "too_many_callbacks",
            f"{MAX_CALLBACKS_PER_WAIT} callbacks were already minted for step {c.step} (the limit); use the "
            "last one, or deliver the event with POST /v1/events",
        )
    tx.emit(
        CallbackIssued(
            step=c.step,
            generation=c.generation,
            callback_id=c.callback_id,
            token_hash=c.token_hash,
            expires_at=wait["expires_at"],
            by=c.by,
        )
    )


def timed_out(tx: Tx, key: str) -> None:
    """The wait's timer fired (already recorded as TimerFired): apply on_timeout."""
    wait = tx.s.event_waits.get(key)
    if wait is None:  # pragma: no cover - the timer is cancelled with the wait
        raise Rejected("stale_timer", f"step {key} waits for no event")
    step = tx.d.step(key)
    if not isinstance(step, WaitEventStep):  # pragma: no cover
        raise Rejected("corrupt", f"event timer on step {key} of kind {step.kind}")
    tx.emit(EventWaitTimedOut(step=key, name=wait["name"], key=wait["key"], expires_at=wait["expires_at"]))
    lane = lane_of(key)
    if step.on_timeout == "fail":
        message = f"no event {wait['name']} (key {wait['key']}) arrived before {wait['expires_at']}"
        fail(tx, {"code": "EventWaitTimedOut", "message": message, "step": key}, lane)
    else:
        enter(tx, None if step.on_timeout == "end" else qualify(lane, step.on_timeout), lane)
