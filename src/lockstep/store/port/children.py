"""The child-runs aggregate: the outbox between a parent run's `run` step and its child (implemented by
sqltx/children.py). A parent and its child are different runs, so no command changes both: each side
writes the row in its own transaction (the parent's request and cancel, the child's end), and the
scheduler's children pass turns a row into the next command on the other side."""

from __future__ import annotations

from typing import Any, Protocol, TypedDict

__all__ = ["ChildRow", "ChildrenTx"]


class ChildRow(TypedDict):
    child_run_id: str
    run_id: str  # the parent
    tenant: str
    step: str
    definition: str
    version: int | None
    input: Any  # JSON, as the parent stored it
    start_key: str
    depth: int
    status: str  # requested | started | ended | reported
    cancel_reason: str | None
    cancel_sent: bool
    child_status: str | None
    result: Any  # {output, error} of the end, as the child stored it
    attempts: int


class ChildrenTx(Protocol):
    def due_children(self, now_ms: int, limit: int) -> list[ChildRow]: ...
    def child_row(self, child_run_id: str) -> ChildRow | None: ...
    def mark_child(
        self,
        child_run_id: str,
        status: str,
        now_ms: int,
        *,
        available_at: int | None = None,
        child_status: str | None = None,
        result: Any = None,
        error: str | None = None,
        tried: bool = False,
    ) -> None: ...
    def mark_child_cancel_sent(self, child_run_id: str, now_ms: int) -> None: ...
