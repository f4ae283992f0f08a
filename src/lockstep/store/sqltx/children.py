"""ChildrenTx in SQL: the rows of `child_runs`, written by the effects of a parent's and a child's
appends (StartChild, CancelChild, EndChild) and moved on by the scheduler's children pass."""

from __future__ import annotations

from typing import Any

from ...core.canonical import compact_json, parse_json
from ...core.effects import CancelChild, EndChild, StartChild
from ...core.state import RunState
from ..port.children import ChildRow
from .base import SqlBase

__all__ = ["SqlChildrenTx"]


def _row(r: Any) -> ChildRow:
    return {
        "child_run_id": r[0],
        "run_id": r[1],
        "tenant": r[2],
        "step": r[3],
        "definition": r[4],
        "version": int(r[5]) if r[5] is not None else None,
        "input": parse_json(r[6]),
        "start_key": r[7],
        "depth": int(r[8]),
        "status": r[9],
        "cancel_reason": r[10],
        "cancel_sent": bool(r[11]),
        "child_status": r[12],
        "result": parse_json(r[13]) if r[13] is not None else None,
        "attempts": int(r[14]),
    }


class SqlChildrenTx(SqlBase):
    def due_children(self, now_ms: int, limit: int) -> list[ChildRow]:
        rows = self.c.execute(self.q["children_due"], {"now": now_ms, "limit": limit}).fetchall()
        return [_row(r) for r in rows]

    def child_row(self, child_run_id: str) -> ChildRow | None:
        r = self._one("child_row", child_run_id=child_run_id)
        return _row(r) if r else None

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
    ) -> None:
        self.c.execute(
            self.q["child_mark"],
            {
                "child_run_id": child_run_id,
                "status": status,
                "child_status": child_status,
                "result": compact_json(result) if result is not None else None,
                "error": error,
                "tried": int(tried),
                "available_at": available_at if available_at is not None else now_ms,
                "now": now_ms,
            },
        )

    def mark_child_cancel_sent(self, child_run_id: str, now_ms: int) -> None:
        self.c.execute(self.q["child_cancel_sent"], {"child_run_id": child_run_id, "now": now_ms})

    def _write_child_effect(
        self, run: RunState, fx: StartChild | CancelChild | EndChild, now_ms: int
    ) -> None:
        if isinstance(fx, StartChild):
            self._write(
                "child_insert",
                {
                    "child_run_id": fx.child_run_id,
                    "run_id": run.run_id,
                    "tenant": run.tenant,
                    "step": fx.step,
                    "definition": fx.definition,
                    "version": fx.version,
                    "input": compact_json(fx.input),
                    "start_key": fx.start_key,
                    "depth": fx.depth,
                    "now": now_ms,
                },
            )
        elif isinstance(fx, CancelChild):
            self._write("child_cancel", {"child_run_id": fx.child_run_id, "reason": fx.reason, "now": now_ms})
        else:  # the child's own end: its row is keyed by its id
            result = compact_json({"output": fx.output, "error": fx.error})
            params = {"child_run_id": run.run_id, "child_status": fx.status, "result": result, "now": now_ms}
            self._write("child_end", params)
