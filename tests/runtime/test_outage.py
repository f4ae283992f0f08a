"""Database outage: a database locked past the busy timeout makes worker and scheduler passes fail;
they log, back off and carry on, and the run completes once the database is available again.

In-process (Engine.worker) because the CLI's busy timeout is 30s; the worker threads are the same code
the `lockstep worker` process runs.
"""

from __future__ import annotations

import logging
import sqlite3
from contextlib import closing
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from prockit import sqlite_only, wait_until

from lockstep import Engine, Registry, activity


@sqlite_only("the outage is a SQLite write lock held past the busy timeout")
def test_worker_and_scheduler_survive_a_database_locked_past_the_busy_timeout(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A write lock held past the busy timeout is logged and retried; no thread dies; the run completes."""
    registry = Registry()

    @activity("outage.echo", registry=registry)
    def echo(input: dict[str, Any]) -> dict[str, Any]:
        return input

    caplog.set_level(logging.WARNING, logger="lockstep")
    engine = Engine.open(db_url, busy_timeout=timedelta(milliseconds=100))
    worker = None
    try:
        engine.publish(
            {
                "name": "outage",
                "steps": [
                    {"id": "nap", "wait": "100ms"},
                    {"id": "echo", "activity": "outage.echo", "input": "${input}", "timeout": "5s"},
                ],
            }
        )
        worker = engine.worker(
            registry, lease_ttl=timedelta(seconds=1), poll_interval=timedelta(milliseconds=20)
        )
        path = Path(db_url[len("sqlite:///") :])
        with closing(sqlite3.connect(path, isolation_level=None)) as blocker:
            blocker.execute("BEGIN IMMEDIATE")  # the "outage": nobody else can write
            worker.start()

            def both_failed() -> bool:
                names = {r.name for r in caplog.records if r.levelno >= logging.WARNING}
                return {"lockstep.worker", "lockstep.scheduler"} <= names

            wait_until(both_failed, 10, "the worker and the scheduler to report failed passes")
            blocker.execute("ROLLBACK")
        assert all(t.is_alive() for t in worker._threads), "a worker thread died during the outage"

        run = engine.start("outage", input={"x": 1})
        shown = engine.wait_for(run, timeout=20)
        assert shown["status"] == "completed"
        assert shown["output"] == {"x": 1}
    finally:
        if worker is not None:
            worker.stop(timeout=10)
        engine.close()
