"""The run-webhooks checks can fail: a lost event, first arrivals out of seq order, two webhook-ids for
one event and an unverifiable request are each flagged; what the receiver got in full passes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.faults.checker import Verdict
from lab.faults.hookcheck import check_webhooks
from lockstep import Engine

DEF = {
    "name": "hooked",
    "steps": [
        {"id": "ok", "approval": {"approvers": {"users": ["alice"]}, "quorum": 1, "timeout": "1h"}},
        {"id": "done", "succeed": True},
    ],
}


class Fleet:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine


def got_for(engine: Engine, run: str) -> list[tuple[str, dict[str, Any]]]:
    kinds = {"ApprovalRequested": "approval.requested", "RunCompleted": "run.completed"}
    return [
        (f"msg_{run}_{e['seq']}", {"type": kinds[e["type"]], "data": {"run_id": run, "seq": e["seq"]}})
        for e in engine.events(run, tenant="acme")
        if e["type"] in kinds
    ]


def test_each_webhook_violation_is_flagged(tmp_path: Path) -> None:
    """All delivered: clean; then one missing, reversed, re-keyed and forged: each check counts."""
    with Engine.open(f"sqlite:///{tmp_path}/db.sqlite") as engine:
        p = engine.service.principals
        p.create_tenant("acme")
        p.create_user("acme", "alice", ["approver"], [])
        engine.publish(DEF, tenant="acme")
        run = engine.start("hooked", tenant="acme")
        me = p.principal("acme", "alice")
        assert me is not None
        (item,) = engine.service.approvals.inbox(me)
        engine.service.approvals.decide_by_request(me, item.request_id, "approve")
        got = got_for(engine, run)
        assert len(got) == 2
        fleet: Any = Fleet(engine)
        clean = Verdict()
        check_webhooks(fleet, "acme", got, 0, clean)
        assert clean.ok, clean.examples
        bad = Verdict()
        rekeyed = (got[1][0] + "-other", got[1][1])
        check_webhooks(fleet, "acme", [got[1], got[0], rekeyed], 1, bad)
        assert bad.violations["webhooks_out_of_order"] == 1
        assert bad.violations["webhooks_forged"] == 2  # the unverifiable request, the second id
        lost = Verdict()
        check_webhooks(fleet, "acme", got[:1], 0, lost)
        assert lost.violations["webhooks_lost"] == 1
