"""Run webhooks across a real crash, on both backends: a `lockstep scheduler` is SIGKILLed while its POST
of a delivery is in flight (the receiver holds the request); a new scheduler takes the delivery again
once the claim's lease ran out. Every delivery arrives at least once, every copy of one carries the same
webhook-id and verifies with the `standardwebhooks` library, in order per run, and the rows end
delivered."""

from __future__ import annotations

import json
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prockit import Cluster, Ledger, wait_until
from standardwebhooks.webhooks import Webhook

from lockstep import Engine
from lockstep.app.keys import create_key_file

pytestmark = pytest.mark.slow

APPROVE = {
    "name": "hooked",
    "steps": [
        {"id": "ok", "approval": {"approvers": {"users": ["alice"]}, "quorum": 1, "timeout": "1h"}},
        {"id": "done", "succeed": True},
    ],
}


class HoldingReceiver:
    """Verifies each POST; holds the first one for `hold` seconds before answering (the crash window)."""

    def __init__(self, secret: str = "", hold: float = 5.0) -> None:
        self.secret, self.hold = secret, hold
        self.got: list[tuple[str, dict[str, Any]]] = []
        self.bad = 0
        self.lock = threading.Lock()
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    Webhook(rec.secret).verify(body, headers)
                except Exception:
                    with rec.lock:
                        rec.bad += 1
                    self.send_response(401)
                    self.end_headers()
                    return
                with rec.lock:
                    first = not rec.got
                    rec.got.append((headers["webhook-id"], json.loads(body)))
                if first:
                    time.sleep(rec.hold)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def ids(self) -> list[str]:
        with self.lock:
            return [i for i, _ in self.got]


def test_scheduler_sigkilled_mid_delivery_delivers_at_least_once_with_one_id(
    tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kill -9 during the first POST: every delivery arrives, the first twice with the same id."""
    key = tmp_path / "lockstep.key"
    create_key_file(key)
    monkeypatch.setenv("LOCKSTEP_KEY_FILE", str(key))
    monkeypatch.setenv("LOCKSTEP_LIMITS", "egress_allow_loopback=1")  # every process: receivers on loopback
    monkeypatch.setenv("LOCKSTEP_WEBHOOK_LEASE_MS", "1500")
    monkeypatch.setenv("LOCKSTEP_WEBHOOK_RETRY_MS", "50")
    engine = Engine.open(db_url, keys=key, server_limits={"egress_allow_loopback": 1})
    rec = HoldingReceiver()
    cluster = Cluster(tmp_path, db_url, Ledger(tmp_path / "ledger.db"))
    try:
        p = engine.service.principals
        p.create_tenant("default")
        engine.service.egress.set(
            "default", {"allow_hosts": ["127.0.0.1"], "allow_http": True, "allow_loopback": True}, actor="t"
        )
        alice = p.create_user("default", "alice", ["approver"], [])
        assert alice.api_key
        sub = engine.service.webhooks.subscribe(
            "default", rec.url, ["approval.requested", "run.completed"], "t"
        )
        rec.secret = sub.secret
        engine.publish(APPROVE)
        runs = [engine.start("hooked") for _ in range(3)]
        me = p.principal("default", "alice")
        assert me is not None
        for item in engine.service.approvals.inbox(me):
            engine.service.approvals.decide_by_request(me, item.request_id, "approve")
        expected = {d["id"] for d in engine.service.webhooks.deliveries("default", sub.id)}
        assert len(expected) == 6
        first = cluster.scheduler("s1")
        wait_until(rec.ids, 30, "the first POST to arrive")
        first.signal(signal.SIGKILL)
        first.wait(10)
        cluster.scheduler("s2")
        wait_until(lambda: expected <= set(rec.ids()), 60, "every delivery")
        hooks = engine.service.webhooks
        delivered = lambda: all(d["status"] == "delivered" for d in hooks.deliveries("default", sub.id))  # noqa: E731
        wait_until(delivered, 30, "every row delivered")
    finally:
        cluster.shutdown()
        rec.server.shutdown()
        rec.server.server_close()
        engine.close()
    ids = rec.ids()
    assert ids.count(ids[0]) >= 2, "the delivery in flight at the kill was not retried"
    assert rec.bad == 0
    for run in runs:
        kinds = [b["type"] for i, b in rec.got if b["data"]["run_id"] == run]
        firsts = list(dict.fromkeys(kinds))
        assert firsts == ["approval.requested", "run.completed"], kinds
