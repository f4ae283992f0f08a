"""The http step tests' world: an engine on one backend with a key and the server's loopback switch on
(`egress_allow_loopback=1`, as a test server's operator sets it), tenants acme and other with an admin,
an operator and a viewer each, acme's egress policy allowing the loopback server, and an in-process
worker. A module of its own, uniquely named (never imported as conftest)."""

from __future__ import annotations

import functools
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from anyio.from_thread import BlockingPortal, start_blocking_portal
from loopback import Loopback  # tests/http: on sys.path

from lockstep.api.app import create_app
from lockstep.engine import Engine
from lockstep.runtime.activity import Registry
from lockstep.runtime.worker import Worker
from lockstep.store import AuditFilter

__all__ = ["TENANT", "Api", "World", "backend_url", "definition", "open_world"]

TENANT = "acme"
OTHER = "other"
LOOPBACK = {"egress_allow_loopback": 1}


def definition(name: str, http: dict[str, Any], **step: Any) -> dict[str, Any]:
    """A one-step definition whose step `call` is `http` (retries fast by default)."""
    http = {"retry": {"max_attempts": 3, "initial_interval": "50ms"}, "timeout": "5s", **http}
    return {"name": name, "steps": [{"id": "call", "http": http, **step}]}


class Api:
    """Blocking calls into the ASGI app (no server, no sockets), on an anyio portal."""

    def __init__(self, app: Any, stack: ExitStack) -> None:
        self.portal: BlockingPortal = stack.enter_context(start_blocking_portal())
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
        stack.callback(self.portal.call, self.client.aclose)

    def request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        return self.portal.call(functools.partial(self.client.request, method, url, **kw))

    def get(self, url: str, **kw: Any) -> httpx.Response:
        return self.request("GET", url, **kw)

    def put(self, url: str, **kw: Any) -> httpx.Response:
        return self.request("PUT", url, **kw)

    def post(self, url: str, **kw: Any) -> httpx.Response:
        return self.request("POST", url, **kw)


@dataclass
class World:
    url: str
    engine: Engine
    server: Loopback
    stack: ExitStack
    key_file: Path | None = None
    api_keys: dict[tuple[str, str], str] = field(default_factory=dict)
    worker: Worker | None = None

    @property
    def service(self) -> Any:
        return self.engine.service

    def api(self) -> Api:
        return Api(create_app(self.service, ui=False), self.stack)

    def start_worker(self, **kw: Any) -> Worker:
        self.worker = self.engine.worker(Registry(), poll_interval=timedelta(milliseconds=20), **kw).start()
        return self.worker

    def allow_loopback(self, tenant: str = TENANT, **extra: Any) -> None:
        self.service.egress.set(
            tenant,
            {"allow": [self.server.url("/")], "allow_http": True, "allow_loopback": True, **extra},
            actor="admin",
        )

    def run(
        self, doc: dict[str, Any], input: Any = None, tenant: str = TENANT, timeout: float = 30.0
    ) -> dict[str, Any]:
        """Publish `doc`, start a run of it and wait until it has ended; its view."""
        self.engine.publish(doc, tenant=tenant)
        run_id = self.engine.start(doc["name"], input=input or {}, tenant=tenant, actor="admin")
        return self.wait(run_id, tenant, timeout)

    def wait(self, run_id: str, tenant: str = TENANT, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            shown = self.engine.show(run_id, tenant=tenant)
            if shown["status"] in ("completed", "failed", "cancelled", "needs_attention"):
                return shown
            assert time.monotonic() < deadline, f"run {run_id} never ended: {shown['status']}"
            time.sleep(0.02)

    def events(self, run_id: str, tenant: str = TENANT) -> list[dict[str, Any]]:
        return list(self.engine.events(run_id, tenant=tenant))

    def audit(self, action: str, tenant: str = TENANT) -> list[dict[str, Any]]:
        with self.service.read() as tx:
            rows = [asdict(r) for r in tx.audit_page(tenant, AuditFilter(), None, 10_000)]
        return sorted((r for r in rows if r["action"] == action), key=lambda r: r["id"])


def backend_url(kind: str, tmp_path: Path, request: Any) -> str:
    """A fresh database of `kind` (PostgreSQL: from the session's cluster, with the schema)."""
    if kind == "sqlite":
        return f"sqlite:///{tmp_path}/lockstep.db"
    return str(request.getfixturevalue("pg_url"))


def open_world(url: str, key_file: Path | None, stack: ExitStack, *, loopback: bool = True) -> World:
    engine = Engine.open(url, keys=key_file, server_limits=LOOPBACK if loopback else None)
    stack.callback(engine.close)
    server = Loopback.start()
    stack.callback(server.close)
    w = World(url, engine, server, stack, key_file)
    for tenant in (TENANT, OTHER):
        engine.service.principals.create_tenant(tenant)
        for user, roles in (("admin", ["admin"]), ("op", ["operator"]), ("viewer", ["viewer"])):
            made = engine.service.principals.create_user(tenant, user, roles, [])
            w.api_keys[(tenant, user)] = made.api_key
    return w
