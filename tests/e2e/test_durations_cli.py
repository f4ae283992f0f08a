"""`lockstep show` prints each step's start, finish and duration, and the time in approval (requested
to decided, or so far), from the run's recorded times; `--json` carries them as `duration_seconds` and
`kind`. Both backends; the run is driven in-process with a fake clock, then shown by the CLI."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from clikit import Cli

from lockstep.app.service import Service
from lockstep.store import open_store

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
TTL = timedelta(seconds=30)
FLOW: dict[str, Any] = {
    "name": "po",
    "steps": [
        {"id": "check", "activity": "po.check", "timeout": "30s"},
        {"id": "review", "approval": {"approvers": {"users": ["alice"]}, "quorum": 1, "timeout": "3d"}},
        {"id": "pay", "activity": "po.pay", "timeout": "30s"},
    ],
}


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def _two_runs(url: str) -> tuple[str, str]:
    """One run decided after 1h 30m and paid; one still waiting for its approval."""
    clock = Clock()
    store = open_store(url)
    try:
        svc = Service(store, clock=clock)
        svc.principals.create_tenant("default")
        svc.principals.create_user("default", "alice", ["approver"], [])
        svc.publish("default", FLOW)
        decided, waiting = (svc.start("default", "po", input={}).run_id for _ in range(2))
        for _ in range(2):
            clock.now += timedelta(seconds=6)
            (lease,) = svc.claim("w", ["po.check"], limit=1, lease_ttl=TTL)
            svc.complete(lease.task_id, lease.attempt, lease.fencing, {})
        clock.now += timedelta(hours=1, minutes=30)
        alice = svc.principals.principal("default", "alice")
        assert alice is not None
        svc.approvals.decide_in_session(alice, decided, "review", "approve")
        clock.now += timedelta(seconds=2)
        (lease,) = svc.claim("w", ["po.pay"], limit=1, lease_ttl=TTL)
        svc.complete(lease.task_id, lease.attempt, lease.fencing, {})
    finally:
        store.close()
    return decided, waiting


def _row(shown: str, step: str) -> dict[str, str]:
    """The table's row of `step`, by column name."""
    lines = [line for line in shown.splitlines() if "│" in line or "┃" in line]
    header = [c.strip() for c in re.split("[┃│]", lines[0])[1:-1]]
    for line in lines[1:]:
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells and cells[0] == step:
            return dict(zip(header, cells, strict=True))
    raise AssertionError(f"no row for {step} in:\n{shown}")


def test_show_prints_step_durations_and_time_in_approval(cli: Cli) -> None:
    """The decided run: check took 6s, review 1h 30m in approval, pay 2s, each with its start and
    finish; the waiting run: its review's time in approval so far, no finish."""
    decided, waiting = _two_runs(cli.url)
    shown = cli.run("show", decided).stdout
    check = _row(shown, "check")
    assert (check["started"], check["finished"], check["took"]) == (
        "2025-03-01 09:00:00",
        "2025-03-01 09:00:06",
        "6s",
    )
    review = _row(shown, "review")
    assert (review["started"], review["finished"]) == ("2025-03-01 09:00:06", "2025-03-01 10:30:12")
    assert review["took"] == "1h 30m"
    assert review["detail"] == "time in approval 1h 30m"
    assert _row(shown, "pay")["took"] == "2s"
    steps = cli.json("show", decided, "--json")["steps"]
    assert steps["review"]["kind"] == "approval"
    assert steps["review"]["duration_seconds"] == 5406.0  # 09:00:06 to 10:30:12
    assert steps["check"]["duration_seconds"] == 6.0
    review = _row(cli.run("show", waiting).stdout, "review")
    assert review["status"] == "waiting_approval"
    assert review["finished"] == ""
    assert review["took"].endswith(" so far")
    assert review["detail"] == f"time in approval {review['took']}"
    assert cli.json("show", waiting, "--json")["steps"]["pay"]["duration_seconds"] is None
