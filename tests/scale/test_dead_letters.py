"""Dead letters with real processes on PostgreSQL: a task whose activity no worker serves goes to the
dead-letter state after the tenant's unserved_after, is listed by `lockstep dead-letters`, and completes
after an operator deploys a worker for it and runs `lockstep retry`."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lockstep import Engine

from .scalekit import Db, Ledger, ScaleFleet, wait_until

pytestmark = pytest.mark.slow

TENANT = "ops"
DEFINITION = {
    "name": "needs-other",
    "steps": [
        {"id": "served", "activity": "scale.work", "input": {}, "timeout": "10s"},
        {"id": "unserved", "activity": "scale.other", "input": {}, "timeout": "10s"},
    ],
}


@pytest.fixture
def fleet(tmp_path: Path, pg_url: str) -> Iterator[tuple[ScaleFleet, Ledger]]:
    ledger = Ledger(str(tmp_path / "ledger.db"))
    f = ScaleFleet(tmp_path, pg_url, ledger.where)
    try:
        yield f, ledger
    finally:
        f.shutdown()


def _start(f: ScaleFleet, pg_url: str) -> str:
    f.cli("tenants", "create", TENANT)
    f.cli("tenants", "set", TENANT, "--unserved-after", "1s")
    with Engine.open(pg_url) as engine:
        engine.publish(DEFINITION, tenant=TENANT)
        return engine.start(DEFINITION["name"], key=f"dl-{uuid.uuid4().hex}", tenant=TENANT)


def _dead_lettered(db: Db, run_id: str) -> dict[str, Any] | None:
    rows = db.rows("SELECT status, snapshot FROM runs WHERE run_id = %s", (run_id,))
    if not rows or rows[0][0] != "needs_attention":
        return None
    attention: dict[str, Any] = json.loads(rows[0][1]).get("attention") or {}
    return attention


def test_unserved_activity_dead_letters_then_retry_completes(
    fleet: tuple[ScaleFleet, Ledger], pg_url: str
) -> None:
    """No worker serves scale.other: dead-lettered, listed, retried once a worker serves it, completes."""
    f, ledger = fleet
    db = Db(pg_url)
    f.scheduler("scheduler")
    f.worker("worker-work", only=["scale.work"])
    run_id = _start(f, pg_url)
    t0 = time.monotonic()
    attention = wait_until(lambda: _dead_lettered(db, run_id), 60, "the run to be dead-lettered")
    took = time.monotonic() - t0
    assert attention["code"] == "dead_letter", attention
    assert attention["step"] == "unserved"
    assert "scale.other" in attention["reason"], attention
    shown = f.cli_json("show", run_id, "--json", tenant=TENANT)
    assert shown["status"] == "needs_attention"
    assert shown["steps"]["served"]["status"] == "succeeded"
    assert shown["steps"]["unserved"]["status"] == "dead_letter"

    listed = f.cli_json("dead-letters", "--json", tenant=TENANT)
    assert [(d["run_id"], d["step"]) for d in listed] == [(run_id, "unserved")], listed
    assert "scale.other" in listed[0]["reason"]
    assert db.value("SELECT count(*) FROM tasks WHERE run_id = %s AND status = 'dead'", (run_id,)) == 1

    f.worker("worker-other", only=["scale.other"])
    retried = f.cli_json("retry", run_id, "unserved", "--reason", "worker deployed", tenant=TENANT)
    assert retried["attempt"] == 2, retried
    wait_until(
        lambda: db.value("SELECT status FROM runs WHERE run_id = %s", (run_id,)) == "completed",
        30,
        "the retried run to complete",
    )
    events = f.cli_json("events", run_id, "--json", tenant=TENANT)
    types = [e["type"] for e in events]
    assert "ActivityDeadLettered" in types, types
    assert "StepRetried" in types, types
    retried_ev = next(e for e in events if e["type"] == "StepRetried")
    assert retried_ev["data"].get("reason") == "worker deployed", retried_ev
    assert f.cli_json("dead-letters", "--json", tenant=TENANT) == []
    effects = ledger.rows("SELECT step, count(*) FROM ledger_effects GROUP BY step ORDER BY step")
    assert effects == [("served", 1), ("unserved", 1)], effects
    assert f.cli("verify", run_id, tenant=TENANT).returncode == 0
    print(f"\nDEAD LETTER: unserved_after 1s; dead-lettered {took:.1f}s after the start (sweep period 30s)")


def test_dead_letter_honours_a_short_unserved_after(fleet: tuple[ScaleFleet, Ledger], pg_url: str) -> None:
    """With unserved_after 1s and a scheduler running, the unserved task is dead-lettered within seconds."""
    f, _ = fleet
    db = Db(pg_url)
    f.scheduler("scheduler")
    f.worker("worker-work", only=["scale.work"])
    run_id = _start(f, pg_url)
    wait_until(lambda: _dead_lettered(db, run_id), 8, "the run to be dead-lettered within 8s", interval=0.1)
