"""The contract-review process of `lockstep serve --example`: legal and finance approve side by side
(each from their own inbox), then the contract's lines are reserved by a real worker, two at a time."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

import lockstep.examples.activities  # noqa: F401 - registers the example activities
from lockstep.engine import Engine
from lockstep.examples.activities import LEDGER_ENV
from lockstep.examples.bootstrap import bootstrap
from lockstep.runtime.activity import REGISTRY


def test_the_example_contract_is_approved_in_parallel_then_reserved_per_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dana (legal) and carol (finance) each see their own request; after both, the three lines are
    reserved and the run completes with one reservation per line."""
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "ledger.db"))
    with Engine.open(f"sqlite:///{tmp_path / 'db.sqlite'}") as engine:
        info = bootstrap(engine, str(tmp_path))
        svc = engine.service
        run = next(r for r in info["runs"] if svc.show("default", r).definition.name == "contract-review")
        shown = svc.show("default", run)
        assert shown.status == "waiting"
        assert "branch legal: approval from dana" in (shown.wait_reason or "")
        assert "branch finance: approval from group finance" in (shown.wait_reason or "")
        for who in ("dana", "carol"):
            me = svc.principals.principal("default", who)
            assert me is not None
            (item,) = [i for i in svc.approvals.inbox(me) if i.run_id == run]
            svc.approvals.decide_in_session(me, run, item.step, "approve", "fine")
        worker = engine.worker(REGISTRY, lease_ttl=timedelta(seconds=5), concurrency=2).start()
        try:
            done = engine.wait_for(run, ("completed", "failed"), timeout=20, tenant="default")
        finally:
            worker.stop(timeout=10)
        assert done["status"] == "completed"
        reserved = done["steps"]["lines"]["output"]
        assert [r["reservation_id"] for r in reserved] == ["res-C-77-0", "res-C-77-1", "res-C-77-2"]
        assert all(r["ok"] for r in engine.verify(run))
