"""An event delivered to 20 waiting runs by a real `lockstep serve`, SIGKILLed by a fail point in the
middle of committing the 8th run's delivery, on both backends: after a restart, a resend of the same
event id finishes the delivery; every run received the event exactly once (one EventReceived with that
id in its history), a further resend is a replay, and the histories verify."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from prockit import Cluster, wait_until

from lab.fleet import Proc, free_port
from lockstep import Engine

pytestmark = pytest.mark.slow

WAITS = {
    "name": "parcels",
    "steps": [
        {"id": "delivered", "wait_event": {"name": "parcel-delivered", "key": "${input.t}", "timeout": "1d"}}
    ],
}
EVENT = {"name": "parcel-delivered", "key": "K20", "id": "evt-crash", "payload": {"at": "noon"}}


def serve(cluster: Cluster, name: str, faults: str = "") -> Proc:
    port = free_port()
    proc = cluster.spawn(name, ["serve", "--port", str(port), "--log-format", "console"], faults=faults)
    proc.url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if not proc.alive():
            raise RuntimeError(f"{name} exited:\n{proc.log()[-3000:]}")
        try:
            return httpx.get(f"{proc.url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(healthy, 30, f"{name} to be healthy", interval=0.05)
    return proc


def received(engine: Engine, run_id: str) -> list[str]:
    return [e["data"]["event_id"] for e in engine.events(run_id) if e["type"] == "EventReceived"]


def test_sigkill_while_delivering_to_20_runs_then_resend_delivers_each_exactly_once(
    cluster: Cluster, engine: Engine
) -> None:
    """Killed mid-delivery: 7 runs have it, 13 wait; the resend reaches the 13; nobody gets it twice."""
    svc = engine.service
    svc.principals.create_tenant("default")
    key = svc.principals.create_user("default", "partner", ["publisher"], []).api_key
    auth = {"Authorization": f"Bearer {key}"}
    engine.publish(WAITS)
    runs = [engine.start("parcels", input={"t": "K20"}) for _ in range(20)]
    first = serve(cluster, "api1", faults="commit.DeliverEvent=kill@8")
    with pytest.raises(httpx.HTTPError):
        httpx.post(f"{first.url}/v1/events", json=EVENT, headers=auth, timeout=30)
    wait_until(lambda: not first.alive(), 30, "api1 to be killed")
    got = {r: received(engine, r) for r in runs}
    assert sum(1 for ids in got.values() if ids) == 7, got
    assert all(ids in ([], ["evt-crash"]) for ids in got.values())
    second = serve(cluster, "api2")
    r = httpx.post(f"{second.url}/v1/events", json=EVENT, headers=auth, timeout=30)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    assert sorted(answer["delivered_to"]) == sorted(runs)
    assert answer["status"] == "delivered"
    for run in runs:
        assert received(engine, run) == ["evt-crash"], run
        assert engine.show(run)["status"] == "completed"
    again = httpx.post(f"{second.url}/v1/events", json=EVENT, headers=auth, timeout=30).json()
    assert again == {**answer, "replay": True}
    report = json.loads(cluster.cli("verify", "--json").stdout)
    assert report["ok"], report["problems"]
