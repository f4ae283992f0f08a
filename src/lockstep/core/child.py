"""A child run's end, reported back to its parent (the outbox's command, in the parent's own
transaction): the `run` step succeeds with the child's output, or fails with its error; a parent (or a
branch) being cancelled only records it and goes on winding down."""

from __future__ import annotations

from .commands import ChildEnded, Rejected
from .events import ChildRunEnded
from .flow import Tx, advance_after, fail, settle, winding_down
from .paths import lane_of

__all__ = ["child_ended"]

_CODES = {"failed": "ChildRunFailed", "cancelled": "ChildRunCancelled"}


def child_ended(tx: Tx, c: ChildEnded) -> None:
    s = tx.s
    awaited = s.children.get(c.step)
    if s.terminal or awaited is None or awaited["child_run_id"] != c.child_run_id:
        raise Rejected("stale_child", f"run {s.run_id} no longer waits for child run {c.child_run_id}")
    status = c.status if c.status in ("completed", "failed", "cancelled") else "failed"
    error = c.error if isinstance(c.error, dict) else None
    tx.emit(
        ChildRunEnded(
            step=c.step,
            child_run_id=c.child_run_id,
            status=status,
            output=c.output if status == "completed" else None,
            error=error,
        )
    )
    lane = lane_of(c.step)
    if winding_down(tx.s, lane):
        settle(tx)
    elif status == "completed":
        advance_after(tx, c.step)
    else:
        why = f"{(error or {}).get('code')}: {(error or {}).get('message')}" if error else status
        message = f"child run {c.child_run_id} ({awaited['definition']}) {status}: {why}"
        fail(tx, {"code": _CODES[status], "message": message, "step": c.step}, lane)
