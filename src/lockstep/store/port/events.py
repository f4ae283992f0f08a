"""The external-events aggregate (implemented by sqltx/events.py): the events inbox (every event a
publisher sent, by id per tenant), the waits index (which runs wait for which name and key; written
by the runs' own appends), the per-wait callbacks (by their token's hash) and the tenants' named
integration secrets (sealed)."""

from __future__ import annotations

from typing import Any, Protocol, TypedDict

__all__ = ["CallbackRow", "EventsTx", "InboxRow", "WaitRow"]


class InboxRow(TypedDict):
    tenant: str
    event_id: str
    name: str
    key: str
    payload: Any
    status: str  # delivering | delivered | buffered | consumed | expired
    delivered_to: list[str]
    received_at: int
    buffer_until: int | None


class WaitRow(TypedDict):
    run_id: str
    step: str
    tenant: str
    name: str
    key: str
    generation: int
    expires_at: str


class CallbackRow(TypedDict):
    token_hash: str
    callback_id: str
    tenant: str
    run_id: str
    step: str
    generation: int
    expires_at: str
    status: str  # open | used | replaced | closed
    used_at: int | None


class EventsTx(Protocol):
    def inbox_get(self, tenant: str, event_id: str) -> InboxRow | None: ...
    def inbox_insert(
        self, tenant: str, event_id: str, name: str, key: str, payload: Any, now_ms: int
    ) -> bool:
        """False if the tenant already has an event with this id."""
        ...

    def inbox_delivered_to(self, tenant: str, event_id: str, runs: list[str], now_ms: int) -> None: ...
    def inbox_status(
        self, tenant: str, event_id: str, was: str, status: str, now_ms: int, buffer_until: int | None = None
    ) -> bool:
        """Move the row from `was` to `status`; False if it was not in `was` (someone else moved it)."""
        ...

    def inbox_buffered_count(self, tenant: str, now_ms: int) -> int: ...
    def inbox_stalled(self, before_ms: int, limit: int) -> list[InboxRow]:
        """Events still `delivering` since before `before_ms`: a delivery cut off (its process died)."""
        ...

    def inbox_expire(self, now_ms: int) -> int: ...
    def waits_for(self, tenant: str, name: str, key: str) -> list[WaitRow]: ...
    def waits_buffered(self, now_ms: int, limit: int) -> list[tuple[WaitRow, str]]:
        """(a wait, the id of a buffered event it matches), the oldest events first."""
        ...

    def callback_get(self, token_hash: str) -> CallbackRow | None: ...
    def callbacks_of_run(self, run_id: str) -> list[CallbackRow]: ...
    def callback_use(self, token_hash: str, now_ms: int) -> bool:
        """open -> used; False if it was not open (a replay: it was used, replaced or closed)."""
        ...

    def integration_get(self, tenant: str, name: str) -> Any: ...
    def integration_put(self, tenant: str, name: str, sealed: Any, now_ms: int) -> None: ...
    def integration_names(self, tenant: str) -> list[tuple[str, int, int]]: ...
