"""Helpers of the external-events tests (tests/events: on sys.path): the definition they run, a fake
clock, tenants with a key per role, a synchronous client over the ASGI app."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import httpx
from fastapi import FastAPI

from lockstep.app.principals import ROLES
from lockstep.engine import Engine

T0 = datetime(2026, 1, 1, tzinfo=UTC)
BACKENDS = ["sqlite", "postgresql"]

PARCELS: dict[str, Any] = {
    "name": "parcels",
    "input_schema": {"type": "object", "required": ["tracking_no"]},
    "steps": [
        {
            "id": "delivered",
            "wait_event": {
                "name": "parcel-delivered",
                "key": "${input.tracking_no}",
                "timeout": "7d",
                "on_timeout": "chase",
                "schema": {"type": "object", "required": ["at"], "properties": {"at": {"type": "string"}}},
                "callback": True,
            },
        },
        {"id": "done", "succeed": {"output": {"at": "${steps.delivered.output.at}"}}},
        {"id": "chase", "fail": {"error": "NotDelivered", "message": "no delivery"}},
    ],
}


class FakeClock:
    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> None:
        self.now += timedelta(**kwargs)


@dataclass
class Tenant:
    name: str
    keys: dict[str, str]

    def auth(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[role]}"}


class Client:
    """A synchronous client over the ASGI app (one event loop per request: no server, no sockets)."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    def request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
                return await c.request(method, url, **kw)

        return anyio.run(go)

    def get(self, url: str, **kw: Any) -> httpx.Response:
        return self.request("GET", url, **kw)

    def post(self, url: str, **kw: Any) -> httpx.Response:
        return self.request("POST", url, **kw)


def make_tenant(engine: Engine, name: str) -> Tenant:
    p = engine.service.principals
    p.create_tenant(name)
    return Tenant(name, {role: p.create_user(name, role, [role], []).api_key for role in ROLES})
