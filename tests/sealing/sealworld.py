"""The sealing tests' world: an engine with a key on one backend, tenant acme with an approver, a viewer
without the read_sensitive grant and an auditor with it, an in-process worker, and an HTTP client over
the app. A module of its own, uniquely named (not conftest: `from conftest import` picks whichever
directory's conftest pytest imported last when several suites run on one command line)."""

from __future__ import annotations

import functools
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from anyio.from_thread import BlockingPortal, start_blocking_portal
from sealkit import (  # tests/sealing: on sys.path
    PAY,
    PAY_AUTO,
    PLAIN,
    TENANT,
    charge,
    confirm,
    receipt,
)

from lockstep.api.app import create_app
from lockstep.app.principals import Principal
from lockstep.engine import Engine
from lockstep.runtime.activity import Registry
from lockstep.runtime.worker import Worker
from lockstep.store import AuditFilter

__all__ = ["USERS", "Http", "World", "open_world", "registry"]

USERS: list[tuple[str, list[str]]] = [
    ("alice", ["approver"]),
    ("viewer", ["viewer"]),
    ("auditor", ["viewer"]),
    ("admin", ["admin"]),
]


def registry() -> Registry:
    reg = Registry()
    reg.register("card.charge", charge)
    reg.register("card.receipt", receipt)
    reg.register("card.confirm", confirm)
    return reg


class Http:
    """Blocking calls into the ASGI app (no server, no sockets), on an anyio portal."""

    def __init__(self, app: Any, stack: ExitStack) -> None:
        self.portal: BlockingPortal = stack.enter_context(start_blocking_portal())
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
        stack.callback(self.portal.call, self.client.aclose)

    def get(self, url: str, **kw: Any) -> httpx.Response:
        return self.portal.call(functools.partial(self.client.get, url, **kw))


@dataclass
class World:
    url: str
    key_file: Path
    engine: Engine
    api_keys: dict[str, str]
    http: Http
    stack: ExitStack
    worker: Worker | None = None

    @property
    def service(self) -> Any:
        return self.engine.service

    def principal(self, name: str) -> Principal:
        p = self.service.principals.principal(TENANT, name)
        assert p is not None, name
        return p

    def start_worker(self, **kw: Any) -> Worker:
        self.worker = self.engine.worker(registry(), poll_interval=_ms(20), **kw).start()
        return self.worker

    def start(self, card: str, ref: str, name: str = "pay") -> str:
        return self.engine.start(name, input={"card": card, "ref": ref}, tenant=TENANT, actor="admin")

    def wait(self, run_id: str, predicate: Any, what: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            shown = self.engine.show(run_id, tenant=TENANT)
            if predicate(shown):
                return shown
            assert time.monotonic() < deadline, f"run {run_id} never {what}: {shown['status']}"
            time.sleep(0.02)

    def through(self, card: str, ref: str) -> str:
        """A run of PAY from start to its end: charge, alice approves, the receipt fails (run failed)."""
        run_id = self.start(card, ref)
        self.wait(run_id, lambda s: s["wait_kind"] == "approval", "waited for approval")
        self.service.approvals.decide_in_session(self.principal("alice"), run_id, "approve", "approve")
        self.wait(run_id, lambda s: s["status"] == "failed", "failed")
        return run_id

    def get(self, path: str, user: str) -> Any:
        return self.http.get(path, headers={"Authorization": f"Bearer {self.api_keys[user]}"})

    def audit(self, action: str, tenant: str | None = TENANT) -> list[dict[str, Any]]:
        with self.service.read() as tx:
            rows = [asdict(r) for r in tx.audit_page(tenant, AuditFilter(), None, 10_000)] if tenant else []
        return sorted((r for r in rows if r["action"] == action), key=lambda r: r["id"])


def _ms(n: int) -> timedelta:
    return timedelta(milliseconds=n)


def open_world(url: str, key_file: Path, stack: ExitStack, *, keys: bool = True) -> World:
    engine = Engine.open(url, keys=key_file if keys else None)
    principals = engine.service.principals
    principals.create_tenant(TENANT)
    api_keys = {}
    for name, roles in USERS:
        api_keys[name] = principals.create_user(TENANT, name, roles, []).api_key
    principals.set_grant(TENANT, "auditor", "read_sensitive", granted=True, by="test")
    engine.publish(PAY, tenant=TENANT)
    engine.publish(PLAIN, tenant=TENANT)
    engine.publish(PAY_AUTO, tenant=TENANT)
    http = Http(create_app(engine.service, public_url="http://test"), stack)
    return World(url, key_file, engine, api_keys, http, stack)
