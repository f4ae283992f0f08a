"""Issue 19's promise, end to end with real processes: a tenant that deploys no code sets an egress
policy, a secret and a signing integration at the CLI, publishes a process over the API that calls its
HTTP API with the secret, waits for its partner's signed callback, asks two people with a form, and is
told of the run's end by a signed webhook; `lockstep serve`, `worker` and `scheduler` are subprocesses,
the tenant's API and receiver are HTTP servers on loopback. The secret never reaches the database in
clear, the logs or the run's history; a replayed or forged callback changes nothing."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import ui_fixtures as fx  # tests/e2e has no __init__.py: pytest puts this folder on sys.path
from clikit import fresh_url
from standardwebhooks.webhooks import Webhook

from lab import clifork
from lockstep.app.keys import create_key_file

SECRET = "sk_live_4f1d9a7c-never-in-clear"  # noqa: S105 - the test's own stored secret
TENANT = "acme"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Partner:
    """The tenant's own system on loopback: POST /charges (needs the bearer secret) and POST /hooks (run
    webhooks, each verified with standardwebhooks under `hook_secret`)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.charges: list[dict[str, Any]] = []
        self.hooks: list[dict[str, Any]] = []
        self.forged = 0
        self.hook_secret = ""
        partner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.path == "/charges":
                    if self.headers.get("authorization") != f"Bearer {SECRET}":
                        self.send_response(401)
                        self.end_headers()
                        return
                    key = self.headers.get("idempotency-key")
                    partner.charges.append({"key": key, "body": json.loads(body)})
                    answer = json.dumps({"id": f"ch_{len(partner.charges)}"}).encode()
                    self.send_response(201)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                    return
                try:
                    payload = Webhook(partner.hook_secret).verify(body, dict(self.headers.items()))
                except Exception:  # the library's verification error: counted, answered 401
                    partner.forged += 1
                    self.send_response(401)
                    self.end_headers()
                    return
                partner.hooks.append(payload)
                self.send_response(204)
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def definition(partner: Partner) -> str:
    return f"""
name: charge-deliver-approve
input_schema:
  type: object
  required: [order, amount, tracking_no]
  properties:
    order: {{type: string}}
    amount: {{type: integer}}
    tracking_no: {{type: string}}
steps:
  - id: charge
    http:
      method: POST
      url: "{partner.base}/charges"
      body: {{order: "${{input.order}}", amount: "${{input.amount}}"}}
      auth: {{secret: partner-key}}
      timeout: 5s
  - id: delivered
    wait_event:
      name: parcel-delivered
      key: "${{input.tracking_no}}"
      timeout: 1h
      callback: {{integration: carrier}}
  - id: approve
    approval:
      approvers: {{users: [alice, bob]}}
      quorum: 2
      timeout: 1d
      details: "Release order ${{input.order}}"
      form:
        - {{name: amount, type: number, required: true, minimum: 0}}
        - {{name: note, type: string, maxLength: 200}}
"""


def until(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return fresh_url(request.param, tmp_path, request)


@pytest.fixture
def partner() -> Iterator[Partner]:
    p = Partner()
    yield p
    p.close()


def test_a_tenant_without_code_calls_waits_asks_and_is_notified(
    db: str, tmp_path: Path, partner: Partner
) -> None:
    """Charge with the stored secret (Idempotency-Key sent), wait for the signed callback (a replay is
    409, an unsigned post 401), two approvers with form values, run.completed delivered signed; the
    secret is nowhere in clear."""
    key_file = tmp_path / "lockstep.key"
    create_key_file(key_file)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
    env |= {
        "LOCKSTEP_DB": db,
        "LOCKSTEP_KEY_FILE": str(key_file),
        "LOCKSTEP_LIMITS": "egress_allow_loopback=1",  # the partner is on loopback: the test-only path
    }

    def cli(*args: str, stdin: str | None = None) -> Any:
        done = clifork.run(
            [sys.executable, "-m", "lockstep", *args],
            env=env,
            cwd=tmp_path,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, f"lockstep {' '.join(args)}: {done.stdout}\n{done.stderr}"
        return json.loads(done.stdout) if done.stdout.strip().startswith(("{", "[")) else done.stdout

    cli("tenants", "create", TENANT)
    keys = {
        name: cli("users", "create", name, "--tenant", TENANT, "--roles", role)["api_key"]
        for name, role in (
            ("admin", "admin"),
            ("ops", "operator"),
            ("alice", "approver"),
            ("bob", "approver"),
        )
    }
    egress = ["tenants", "egress", "set", TENANT, "--allow", partner.base + "/", "--allow-http"]
    cli(*egress, "--allow-loopback")
    cli("secrets", "set", "--tenant", TENANT, "partner-key", stdin=SECRET + "\n")
    carrier_secret = cli("webhooks", "secret").strip()
    cli("integrations", "set", "--tenant", TENANT, "carrier", stdin=carrier_secret + "\n")

    port = free_port()
    logs = {name: tmp_path / f"{name}.log" for name in ("serve", "worker", "scheduler")}
    procs: list[subprocess.Popen[bytes]] = []
    api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
    commands = {
        "serve": ["serve", "--port", str(port), "--public-url", f"http://127.0.0.1:{port}"],
        "worker": ["worker", "--poll-interval", "50ms"],
        "scheduler": ["scheduler"],
    }
    try:
        for name, args in commands.items():
            with logs[name].open("wb") as log:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "lockstep", *args],
                        env=env,
                        cwd=tmp_path,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )

        def healthy() -> bool:
            try:
                return api.get("/healthz").status_code == 200
            except httpx.TransportError:
                return False

        until("serve", healthy, 30)

        def auth(user: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {keys[user]}"}

        published = api.post(
            "/v1/definitions",
            content=definition(partner),
            headers={**auth("admin"), "content-type": "application/yaml"},
        )
        assert published.status_code == 201, published.text
        hook = api.post(
            "/v1/webhooks",
            json={"url": partner.base + "/hooks", "events": ["run.completed"]},
            headers=auth("admin"),
        )
        assert hook.status_code == 201, hook.text
        partner.hook_secret = hook.json()["secret"]
        started = api.post(
            "/v1/runs",
            json={
                "definition": "charge-deliver-approve",
                "input": {"order": "o-19", "amount": 1900, "tracking_no": "TRK-7"},
            },
            headers={**auth("ops"), "Idempotency-Key": "order-o-19"},
        )
        assert started.status_code in (200, 201), started.text
        run_id = started.json()["run_id"]

        def run() -> dict[str, Any]:
            r = api.get(f"/v1/runs/{run_id}", headers=auth("ops"))
            assert r.status_code == 200, r.text
            return dict(r.json())

        def waiting_for_event() -> bool:
            waits = api.get(f"/v1/runs/{run_id}/event-waits", headers=auth("ops"))
            return waits.status_code == 200 and bool(waits.json().get("waits"))

        try:
            until("the event wait", waiting_for_event)
        except AssertionError:
            raise AssertionError(f"{run()}\n{logs['worker'].read_text()}") from None
        (charge,) = partner.charges
        assert charge["body"] == {"order": "o-19", "amount": 1900}
        assert charge["key"], "the step's idempotency key is sent as Idempotency-Key"

        minted = api.post(f"/v1/runs/{run_id}/callbacks", json={"step": "delivered"}, headers=auth("ops"))
        assert minted.status_code in (200, 201), minted.text
        callback = minted.json()["url"]
        body = json.dumps({"at": "2026-12-02T10:00:00Z"})
        unsigned = httpx.post(callback, content=body, headers={"content-type": "application/json"})
        assert unsigned.status_code == 401, unsigned.text
        signed = {
            "content-type": "application/json",
            "webhook-id": "msg_carrier_1",
            "webhook-timestamp": str(int(datetime.now(UTC).timestamp())),
            "webhook-signature": Webhook(carrier_secret).sign("msg_carrier_1", datetime.now(UTC), body),
        }
        delivered = httpx.post(callback, content=body, headers=signed)
        assert delivered.status_code in (200, 202), delivered.text
        assert httpx.post(callback, content=body, headers=signed).status_code == 409

        def request_id() -> str | None:
            inbox = api.get("/v1/approvals/inbox", headers=auth("alice")).json()
            return next((i["request_id"] for i in inbox if i["run_id"] == run_id), None)

        rid = until("the approval request", request_id)
        for user, amount in (("alice", 1900), ("bob", 1850)):
            decided = api.post(
                f"/v1/approvals/{rid}/decide",
                json={"decision": "approve", "values": {"amount": amount, "note": f"ok by {user}"}},
                headers=auth(user),
            )
            assert decided.status_code == 200, decided.text

        final = until("the run's end", lambda: (v := run())["status"] in ("completed", "failed") and v)
        assert final["status"] == "completed", final
        until("the run.completed webhook", lambda: partner.hooks)
        (note,) = partner.hooks
        assert note["type"] == "run.completed"
        assert note["data"]["run_id"] == run_id
        assert partner.forged == 0
        steps = final["steps"]
        assert steps["delivered"]["output"] == {"at": "2026-12-02T10:00:00Z"}
        assert steps["approve"]["output"]["values"]["amount"] in (1900, 1850)
        assert len(partner.charges) == 1
        history = api.get(f"/v1/runs/{run_id}/events", headers=auth("ops"))
        assert history.status_code == 200
        assert SECRET not in history.text
        assert "partner-key" in history.text  # the event names the secret (and its version), never its value
    finally:
        api.close()
        for proc in procs:
            fx.stop(proc)
    for name, path in logs.items():
        assert SECRET not in path.read_text(errors="replace"), f"the secret is in the {name} log"
    if db.startswith("sqlite:"):
        raw = b"".join(p.read_bytes() for p in tmp_path.glob("lockstep.db*") if p.is_file())
        assert SECRET.encode() not in raw


def test_a_worker_with_nothing_to_run_says_what_to_give(tmp_path: Path) -> None:
    """`lockstep worker --no-http` without --activities: one line saying what to give, exit 2."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
    done = clifork.run(
        [sys.executable, "-m", "lockstep", "--db", f"sqlite:///{tmp_path}/w.db", "worker", "--no-http"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "give --activities MODULE" in done.stderr
    assert "Traceback" not in done.stderr
