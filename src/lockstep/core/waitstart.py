"""Entering a `wait_event` step and ending its waits with their lane (pure; core/waitevent.py decides
deliveries, callbacks and timeouts). Separate from waitevent.py because flow.py and join.py call these,
and waitevent.py calls flow.py."""

from __future__ import annotations

from typing import Any

import jsonschema

from .definition import WaitEventStep
from .events import EventWaitCancelled, EventWaitStarted
from .expr import ExprError
from .paths import lane_of, within
from .timeutil import iso
from .tx import Tx, timer

__all__ = ["MAX_KEY_LENGTH", "cancel_waits", "payload_problems", "start_wait"]

MAX_KEY_LENGTH = 256


def start_wait(tx: Tx, key: str, step: WaitEventStep, ctx: dict[str, Any]) -> dict[str, Any] | None:
    """Record the wait (name, rendered key, expiry) and arm its timeout; or the error that fails it."""
    try:
        raw = step.key.render(ctx)
    except ExprError as exc:
        return {"code": "ExpressionError", "message": f"wait_event key: {exc}", "step": key}
    if isinstance(raw, bool) or not isinstance(raw, str | int) or not str(raw):
        return {
            "code": "ExpressionError",
            "message": f"wait_event key must give a non-empty string or number, not {raw!r}",
            "step": key,
        }
    corr = str(raw)
    if len(corr) > MAX_KEY_LENGTH:
        return {
            "code": "ExpressionError",
            "message": f"wait_event key is {len(corr)} characters long; at most {MAX_KEY_LENGTH}",
            "step": key,
        }
    expires = tx.now + step.timeout
    tx.emit(
        EventWaitStarted(
            step=key,
            name=step.name,
            key=corr,
            expires_at=iso(expires),
            generation=tx.s.seq + 1,
            callback=step.callback,
            integration=step.integration,
        )
    )
    timer(tx, f"event:{key}", "event", key, expires)
    return None


def payload_problems(step: WaitEventStep, payload: object) -> list[str]:
    """What is wrong with `payload` for `step`'s schema (at most 5 problems), or nothing."""
    if step.schema is None:
        return []
    validator = jsonschema.Draft202012Validator(step.schema)
    errors = sorted(validator.iter_errors(payload), key=lambda e: list(e.absolute_path))
    return [f"payload{''.join(f'[{p!r}]' for p in e.absolute_path)}: {e.message}" for e in errors[:5]]


def cancel_waits(tx: Tx, inside: str, reason: str) -> None:
    """End the event waits of the steps of lane `inside` and the lanes within it (their timers are
    cancelled with every other timer): nothing is in flight, so nothing is waited for."""
    for key in sorted(tx.s.event_waits):
        if within(lane_of(key), inside):
            tx.emit(EventWaitCancelled(step=key, reason=reason))
