"""A granted migration survives a real crash of the process applying it, on both backends: `lockstep
serve` is SIGKILLed (a fail point) right after the decision that grants a bulk request commits, or in
the middle of applying it (the second run's migration written, not committed). The approval is durable;
a `lockstep scheduler` then applies what is left, and every run of the batch is migrated exactly once."""

from __future__ import annotations

import json

import httpx
import pytest
from prockit import Cluster, wait_until

from lab.fleet import Proc, free_port
from lockstep import Engine
from lockstep.app.principals import Principal

pytestmark = pytest.mark.slow

V1 = {"name": "po", "steps": [{"id": "hold", "wait": "1h"}]}
V2 = {
    **V1,
    "migration": {
        "requires_approval": {"approvers": {"users": ["alice", "bob"]}, "quorum": 2, "timeout": "1d"}
    },
    "steps": [{"id": "hold", "wait": "1h"}, {"id": "notify", "succeed": True}],
}


def serve(cluster: Cluster, name: str, faults: str) -> Proc:
    """`lockstep serve` with fail points `faults`, once /healthz answers."""
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


def migrated(engine: Engine, run_id: str) -> int:
    return sum(1 for e in engine.events(run_id) if e["type"] == "WorkflowMigrated")


@pytest.mark.parametrize(
    ("faults", "applied_before"),
    [("migration.approved=kill", 0), ("commit.MigrateRun=kill@2", 1)],
    ids=["after-approval", "mid-batch"],
)
def test_sigkill_between_approval_and_application_still_migrates_each_run_once(
    cluster: Cluster, engine: Engine, faults: str, applied_before: int
) -> None:
    """Killed after the grant commits (nothing applied) or mid-batch (one run applied): the request is
    approved in the database; the scheduler's pass migrates the rest; no run is migrated twice."""
    svc = engine.service
    svc.principals.create_tenant("default")
    svc.principals.create_user("default", "alice", ["approver"], [])
    bob = svc.principals.create_user("default", "bob", ["approver"], []).api_key
    svc.principals.create_user("default", "olga", ["operator"], [])
    engine.publish(V1)
    engine.publish(V2)
    runs = [svc.start("default", "po", version=1).run_id for _ in range(3)]
    bulk = svc.repairs.migrate_many("default", "po", 1, 2, "add the notification", actor="olga")
    assert bulk.request
    rid = bulk.request.request_id
    svc.approvals.decide_by_request(Principal("default", "alice", ("approver",), ()), rid, "approve")

    api = serve(cluster, "api1", faults=faults)
    with pytest.raises(httpx.HTTPError):
        httpx.post(
            f"{api.url}/v1/approvals/{rid}/decide",
            json={"decision": "approve"},
            headers={"Authorization": f"Bearer {bob}"},
            timeout=30,
        )
    wait_until(lambda: not api.alive(), 30, "api1 to be killed")
    assert svc.migrations.request("default", rid).status == "approved"
    assert sorted(migrated(engine, r) for r in runs) == sorted(
        [1] * applied_before + [0] * (3 - applied_before)
    )

    cluster.scheduler("s1")
    wait_until(lambda: svc.migrations.request("default", rid).status == "applied", 60, "the request applied")
    assert [migrated(engine, r) for r in runs] == [1, 1, 1]
    assert {engine.show(r)["definition"]["version"] for r in runs} == {2}
    assert {o.outcome for o in svc.migrations.request("default", rid).runs} == {"migrated"}
    report = json.loads(cluster.cli("verify", "--json").stdout)
    assert report["ok"], report["problems"]
