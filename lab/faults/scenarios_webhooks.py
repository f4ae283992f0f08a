"""Run webhooks under faults: `webhook_receiver_down`. The tenant subscribes a receiver on loopback (in
the driver, verifying every request with `standardwebhooks`) to every run event; payment runs start
(charge, a durable timer, ship) while the receiver is DOWN (nothing listens on its port) for several
seconds, then it comes back; meanwhile the first scheduler is SIGKILLed and replaced. The checker
requires every run to settle while the receiver was down (no run is held up by its webhooks: `stuck`),
and every subscribed event of every run to reach the receiver at least once, signed, under one
webhook-id, in seq order per run (hookcheck.py).

The broken build (`unsafe.webhook_drop_failed`: a delivery whose attempt failed is marked delivered)
must be caught as lost events.
"""

from __future__ import annotations

import json
import threading
import time
from contextlib import suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook

from lockstep.core.effects import WEBHOOK_EVENTS
from lockstep.errors import LockstepError

from ..fleet import free_port
from .base import Ctx, Supervisor, pay_definition, settle_time, start_runs
from .checker import Verdict
from .hookcheck import check_webhooks
from .sealing import init_keys

__all__ = ["webhook_receiver_down"]

DOWN_S = 6.0


class Receiver:
    def __init__(self, port: int) -> None:
        self.port, self.secret = port, ""
        self.got: list[tuple[str, dict[str, Any]]] = []
        self.forged = 0
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    def up(self) -> None:
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    Webhook(rec.secret).verify(body, headers)
                    ok = True
                except Exception:
                    ok = False
                with rec.lock:
                    if ok:
                        rec.got.append((headers["webhook-id"], json.loads(body)))
                    else:
                        rec.forged += 1
                self.send_response(204 if ok else 401)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def down(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


def webhook_receiver_down(ctx: Ctx, *, unsafe: bool = False) -> tuple[Verdict, float | None]:
    f = ctx.fleet
    f.env["LOCKSTEP_LIMITS"] = "egress_allow_loopback=1"  # every process: receivers on loopback
    f.env["LOCKSTEP_WEBHOOK_RETRY_MS"] = "100"
    f.env["LOCKSTEP_WEBHOOK_LEASE_MS"] = "3000"
    init_keys(f)  # the subscription's secret is sealed; every process of the fleet opens it
    accounts = f.engine.service.principals
    with suppress(LockstepError):  # "default" may exist already
        accounts.create_tenant(ctx.tenant)
    rec = Receiver(free_port())
    f.cli(
        "tenants",
        "egress",
        "set",
        ctx.tenant,
        "--allow-host",
        "127.0.0.1",
        "--allow-http",
        "--allow-loopback",
    )
    hooks = f.engine.service.webhooks
    hooks.loopback_ok = True  # the driver's own engine subscribes (the processes have the limit above)
    sub = hooks.subscribe(ctx.tenant, f"http://127.0.0.1:{rec.port}/hook", list(WEBHOOK_EVENTS), "driver")
    rec.secret = sub.secret
    f.engine.publish(pay_definition(wait="100ms"), tenant=ctx.tenant)
    broken = "unsafe.webhook_drop_failed=on" if unsafe else ""
    schedulers = Supervisor(
        2,
        lambda n: f.scheduler(
            f"s{n}",
            faults=";".join(x for x in ("webhooks.post=kill@3" if n == 1 else "", broken) if x),
            wait=n != 1,
        ),
    )
    workers = Supervisor(2, lambda n: f.worker(f"w{n}", scheduler=False))

    def tick() -> None:
        schedulers.tick()
        workers.tick()

    runs = start_runs(ctx, 12 if not ctx.soak else 40)
    since = time.monotonic()
    with ctx.monitor() as mon:
        while time.monotonic() - since < DOWN_S:
            tick()
            time.sleep(0.1)
        settled_while_down = settle_time(ctx, since, tick=tick)
        ctx.count("runs settled while the receiver was down", 1 if settled_while_down is not None else 0)
        rec.up()
        deadline = time.monotonic() + ctx.deadline_s
        while time.monotonic() < deadline and not _all_delivered(f, sub.id, ctx.tenant):
            tick()
            time.sleep(0.2)
    rec.down()
    ctx.count("runs", len(runs))
    ctx.count("schedulers SIGKILLed (restarted)", schedulers.deaths)
    verdict = ctx.verdict(monitor=mon, refs=True)
    for what, value in check_webhooks(f, ctx.tenant, rec.got, rec.forged, verdict).items():
        ctx.injected[what] = value
    return verdict, settled_while_down


def _all_delivered(f: Any, sub_id: str, tenant: str) -> bool:
    try:
        rows = f.engine.service.webhooks.deliveries(tenant, sub_id, 1000)
    except Exception:
        return False
    return bool(rows) and all(r["status"] != "pending" for r in rows)
