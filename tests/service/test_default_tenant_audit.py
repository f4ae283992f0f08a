"""The default tenant works before anyone creates it, and so does its audit log: the first audited
action on it makes its row (audited as an implicit tenant.create) and lands in its own chain, never
among the rows of no tenant; the chains verify."""

from __future__ import annotations

from typing import Any

from lockstep.app.service import Service
from lockstep.store import Store

from .conftest import FakeClock

WAITING: dict[str, Any] = {"name": "nap", "steps": [{"id": "nap", "wait": {"for": "1h"}}]}


def test_a_cancel_on_the_default_tenant_is_in_its_own_chain(store: Store, clock: FakeClock) -> None:
    """Publish, start and cancel on `default` with no tenant row: tenant.create (implicit) then the
    cancel in default's chain, nothing under no tenant, every chain intact."""
    svc = Service(store, clock=clock)
    svc.publish("default", WAITING)
    run_id = svc.start("default", "nap", actor="ops").run_id
    svc.cancel("default", run_id, "not needed", actor="ops")
    actions = [e.action for e in reversed(svc.audit.page("default").items)]
    assert actions[0] == "tenant.create"
    assert "run.cancel" in actions
    assert svc.audit.page("default").items[-1].detail == {"implicit": True}
    assert [e for e in svc.audit.page(None).items if e.detail.get("tenant_given") == "default"] == []
    assert svc.audit.verify().ok
