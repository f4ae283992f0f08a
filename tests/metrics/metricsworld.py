"""The metrics of real processes: `lockstep serve` (with its scheduler duties), `lockstep worker
--metrics-port` and `lockstep scheduler --metrics-port` on one database of each backend run a scripted
scenario (a retry, timers, an approval granted, one timed out, a run cancelled by an operator, three
compensations, a 429 and a 403); `served` holds every process's /metrics text, this driver's own, and
the runs' histories. One scenario per backend per session: the tests only read it.

A uniquely named module (tests/test_suite_imports.py refuses `from conftest import`); conftest.py
registers its fixture."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from prometheus_client import generate_latest

from lab.fleet import Fleet, free_port, wait_until
from lockstep import Engine
from lockstep.core.events import Event

BACKENDS = ["sqlite", "postgresql"]
TOKEN = "metrics-token-for-the-scrapers"  # noqa: S105 - a test value
MODULE = "metrics_activities"
SOURCE = '''
"""The scenario's activities, run by a `lockstep worker` subprocess."""

from lockstep import ActivityError, activity


@activity("m.charge")
def charge(data, ctx):
    if ctx.attempt == 1:
        raise ActivityError("Busy", "the card service is busy")  # retried after 100 ms
    return {"charged": data["amount"]}


@activity("m.refund")
def refund(data, ctx):
    return {"refunded": data["amount"]}


@activity("m.ship")
def ship(data, ctx):
    return {"shipped": True}
'''


def pay(name: str, approval_timeout: str) -> dict[str, Any]:
    return {
        "name": name,
        "steps": [
            {
                "id": "charge",
                "activity": "m.charge",
                "input": {"amount": "${input.amount}"},
                "timeout": "10s",
                "retry": {"max_attempts": 3, "initial_interval": "100ms"},
                "compensate": {"activity": "m.refund", "input": {"amount": "${input.amount}"}},
            },
            {"id": "settle", "wait": "100ms"},
            {
                "id": "review",
                "approval": {
                    "approvers": {"users": ["alice"]},
                    "quorum": 1,
                    "timeout": approval_timeout,
                    "on_timeout": "reject",
                },
            },
            {"id": "ship", "activity": "m.ship", "timeout": "10s"},
        ],
    }


@dataclass
class Served:
    """What the scenario left: each process's /metrics text, the runs' histories, the driver's view."""

    backend: str
    texts: dict[str, str]  # serve, worker, scheduler, driver
    histories: dict[str, list[Event]]
    approved: str  # the run alice approved (in this driver's process)


def promtool() -> str:
    """The promtool binary; missing, the test FAILS with the command that installs it (CI installs it)."""
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool is missing: install it with `apt-get update && apt-get install -y prometheus` "
            "(as root; .ci/run does)"
        )
    return path


@pytest.fixture(scope="session", params=BACKENDS)
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    backend = str(request.param)
    tmp = tmp_path_factory.mktemp(f"metrics-{backend}")
    if backend == "sqlite":
        url = f"sqlite:///{tmp / 'lockstep.db'}"
    else:
        url = request.getfixturevalue("pg_cluster").create_database(
            f"m_{uuid.uuid4().hex[:12]}", template="lockstep_template"
        )
    (tmp / f"{MODULE}.py").write_text(SOURCE)
    fleet = Fleet(
        tmp / "fleet", url, activities=MODULE, env={"LOCKSTEP_METRICS_TOKEN": TOKEN}, pythonpath=[tmp]
    )
    try:
        with Engine.open(url) as engine:
            yield _scenario(backend, fleet, engine)
    finally:
        fleet.shutdown(show_logs=False)


def _scenario(backend: str, fleet: Fleet, engine: Engine) -> Served:
    svc = engine.service
    for tenant in ("acme", "slow"):
        svc.principals.create_tenant(tenant)
    svc.principals.set_tenant("slow", starts_per_second=0.01)  # a burst of one start
    svc.principals.create_user("acme", "alice", ["approver"], [])
    keys = {
        role: svc.principals.create_user("acme", f"u-{role}", [role], []).api_key
        for role in ("operator", "viewer")
    }
    slow_key = svc.principals.create_user("slow", "op", ["operator"], []).api_key
    engine.publish(pay("m-pay", "1h"), tenant="acme")
    engine.publish(pay("m-late", "1s"), tenant="acme")
    engine.publish({"name": "nap", "steps": [{"id": "nap", "wait": "1h"}]}, tenant="slow")
    ports = {"worker": free_port(), "scheduler": free_port()}
    serve = fleet.serve("serve", free_port())
    fleet.worker("w1", extra=["--metrics-port", str(ports["worker"])])
    fleet.scheduler("s1", extra=["--metrics-port", str(ports["scheduler"])])
    api = httpx.Client(base_url=str(serve.url), timeout=30)

    def start(definition: str, key: str, amount: int = 10) -> httpx.Response:
        body = {"definition": definition, "input": {"amount": amount}}
        return api.post("/v1/runs", json=body, headers={"Authorization": f"Bearer {key}"})

    approved, cancelled, late = (
        start(d, keys["operator"]).json()["run_id"] for d in ("m-pay", "m-pay", "m-late")
    )
    assert start("m-pay", keys["viewer"]).status_code == 403
    assert start("nap", slow_key).status_code == 201
    assert start("nap", slow_key).status_code == 429

    def at_approval(run: str) -> bool:
        return engine.show(run, tenant="acme")["wait_kind"] == "approval"

    wait_until(lambda: at_approval(approved) and at_approval(cancelled), 60, "both runs at their approval")
    alice = svc.principals.principal("acme", "alice")
    assert alice is not None
    svc.approvals.decide_in_session(alice, approved, "review", "approve")
    r = api.post(
        f"/v1/runs/{cancelled}/cancel",
        json={"reason": "customer asked"},
        headers={"Authorization": f"Bearer {keys['operator']}"},
    )
    assert r.status_code == 200, r.text
    runs = (approved, cancelled, late)
    wait_until(
        lambda: all(
            engine.show(x, tenant="acme")["status"] in ("completed", "failed", "cancelled") for x in runs
        ),
        90,
        "every run to finish",
    )
    token = {"Authorization": f"Bearer {TOKEN}"}
    texts = {"serve": api.get("/metrics", headers=token).text}
    for name, port in ports.items():
        texts[name] = httpx.get(f"http://127.0.0.1:{port}/metrics", headers=token, timeout=30).text
    texts["driver"] = generate_latest(svc.metrics.exposition(database=False)).decode()
    with svc.read() as tx:
        histories = {x: [e for e, _ in tx.events(x)] for x in runs}
    api.close()
    return Served(backend, texts, histories, approved)
