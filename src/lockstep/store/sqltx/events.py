"""EventsTx in SQL: the events inbox, the waits index and callbacks (written by the effects of the
runs' appends: OpenEventWait, CloseEventWait, StoreCallback) and the integrations' sealed secrets."""

from __future__ import annotations

from typing import Any

from ...core.canonical import compact_json, parse_json
from ...core.effects import CloseEventWait, OpenEventWait, StoreCallback
from ...core.state import RunState
from ..port.events import CallbackRow, InboxRow, WaitRow
from .base import SqlBase

__all__ = ["SqlEventsTx"]

_CLOSED = {"received": "closed", "timed_out": "closed", "cancelled": "closed"}


def _inbox(r: Any) -> InboxRow:
    return {
        "tenant": r[0],
        "event_id": r[1],
        "name": r[2],
        "key": r[3],
        "payload": parse_json(r[4]),
        "status": r[5],
        "delivered_to": list(parse_json(r[6]) or []),
        "received_at": int(r[7]),
        "buffer_until": int(r[8]) if r[8] is not None else None,
    }


def _wait(r: Any) -> WaitRow:
    return {
        "run_id": r[0],
        "step": r[1],
        "tenant": r[2],
        "name": r[3],
        "key": r[4],
        "generation": int(r[5]),
        "expires_at": r[6],
    }


def _callback(r: Any) -> CallbackRow:
    return {
        "token_hash": r[0],
        "callback_id": r[1],
        "tenant": r[2],
        "run_id": r[3],
        "step": r[4],
        "generation": int(r[5]),
        "expires_at": r[6],
        "status": r[7],
        "used_at": int(r[8]) if r[8] is not None else None,
    }


class SqlEventsTx(SqlBase):
    def inbox_get(self, tenant: str, event_id: str) -> InboxRow | None:
        r = self._one("inbox_get", tenant=tenant, event_id=event_id)
        return _inbox(r) if r else None

    def inbox_insert(
        self, tenant: str, event_id: str, name: str, key: str, payload: Any, now_ms: int
    ) -> bool:
        params = {
            "tenant": tenant,
            "event_id": event_id,
            "name": name,
            "key": key,
            "payload": compact_json(payload),
            "now": now_ms,
        }
        return bool(self.c.execute(self.q["inbox_insert"], params).rowcount == 1)

    def inbox_delivered_to(self, tenant: str, event_id: str, runs: list[str], now_ms: int) -> None:
        params = {"tenant": tenant, "event_id": event_id, "delivered_to": compact_json(runs), "now": now_ms}
        self.c.execute(self.q["inbox_delivered_to"], params)

    def inbox_status(
        self, tenant: str, event_id: str, was: str, status: str, now_ms: int, buffer_until: int | None = None
    ) -> bool:
        params = {
            "tenant": tenant,
            "event_id": event_id,
            "was": was,
            "status": status,
            "buffer_until": buffer_until,
            "now": now_ms,
        }
        return bool(self.c.execute(self.q["inbox_status"], params).rowcount == 1)

    def inbox_buffered_count(self, tenant: str, now_ms: int) -> int:
        return int(self._one("inbox_buffered_count", tenant=tenant, now=now_ms)[0])

    def inbox_stalled(self, before_ms: int, limit: int) -> list[InboxRow]:
        rows = self.c.execute(self.q["inbox_stalled"], {"before": before_ms, "limit": limit}).fetchall()
        return [_inbox(r) for r in rows]

    def inbox_expire(self, now_ms: int) -> int:
        return max(int(self.c.execute(self.q["inbox_expire"], {"now": now_ms}).rowcount), 0)

    def waits_for(self, tenant: str, name: str, key: str) -> list[WaitRow]:
        rows = self.c.execute(self.q["waits_for"], {"tenant": tenant, "name": name, "key": key}).fetchall()
        return [_wait(r) for r in rows]

    def waits_buffered(self, now_ms: int, limit: int) -> list[tuple[WaitRow, str]]:
        rows = self.c.execute(self.q["waits_buffered"], {"now": now_ms, "limit": limit}).fetchall()
        return [(_wait(r), str(r[7])) for r in rows]

    def callback_get(self, token_hash: str) -> CallbackRow | None:
        r = self._one("callback_get", token_hash=token_hash)
        return _callback(r) if r else None

    def callbacks_of_run(self, run_id: str) -> list[CallbackRow]:
        return [
            _callback(r) for r in self.c.execute(self.q["callbacks_of_run"], {"run_id": run_id}).fetchall()
        ]

    def callback_use(self, token_hash: str, now_ms: int) -> bool:
        cur = self.c.execute(self.q["callback_use"], {"token_hash": token_hash, "now": now_ms})
        return bool(cur.rowcount == 1)

    def integration_get(self, tenant: str, name: str) -> Any:
        r = self._one("integration_get", tenant=tenant, name=name)
        return parse_json(r[0]) if r else None

    def integration_put(self, tenant: str, name: str, sealed: Any, now_ms: int) -> None:
        params = {"tenant": tenant, "name": name, "secret": compact_json(sealed), "now": now_ms}
        self.c.execute(self.q["integration_put"], params)

    def integration_names(self, tenant: str) -> list[tuple[str, int, int]]:
        rows = self.c.execute(self.q["integration_names"], {"tenant": tenant}).fetchall()
        return [(str(r[0]), int(r[1]), int(r[2])) for r in rows]

    def _write_event_effect(
        self, run: RunState, fx: OpenEventWait | CloseEventWait | StoreCallback, now_ms: int
    ) -> None:
        # Sent at once, never buffered by batch(): a batch flushes its buffer before any other write.
        if isinstance(fx, OpenEventWait):
            params = {
                "run_id": run.run_id,
                "step": fx.step,
                "tenant": run.tenant,
                "name": fx.name,
                "key": fx.key,
                "generation": fx.generation,
                "expires_at": fx.expires_at,
                "now": now_ms,
            }
            self.c.execute(self.q["wait_insert"], params)
        elif isinstance(fx, CloseEventWait):
            self.c.execute(self.q["wait_delete"], {"run_id": run.run_id, "step": fx.step})
            params = {"run_id": run.run_id, "step": fx.step, "status": _CLOSED[fx.outcome]}
            self.c.execute(self.q["callbacks_set_status"], params)
        else:
            # The newest callback is the wait's: the one minted before it stops working.
            params = {"run_id": run.run_id, "step": fx.step, "status": "replaced"}
            self.c.execute(self.q["callbacks_set_status"], params)
            self.c.execute(
                self.q["callback_insert"],
                {
                    "token_hash": fx.token_hash,
                    "callback_id": fx.callback_id,
                    "tenant": run.tenant,
                    "run_id": run.run_id,
                    "step": fx.step,
                    "generation": fx.generation,
                    "expires_at": fx.expires_at,
                    "now": now_ms,
                },
            )
