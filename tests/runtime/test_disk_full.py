"""A SQLite database on a small tmpfs that fills up under a real `lockstep serve` and `lockstep worker`:
writes fail as `unavailable` (503 + Retry-After in the API, exit 6 and one clean line in the CLI), no
process dies, nothing acknowledged is lost, the file stays sound (integrity_check, `lockstep verify`),
and work resumes once the filler is deleted, without restarting anything."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest
from prockit import Cluster, Ledger, wait_until

from lab.fleet import free_port
from lab.fleet.mounts import fill, mounting_allowed, small_disk
from lockstep import Engine

pytestmark = pytest.mark.slow

FLOW = {
    "name": "disk",
    "steps": [
        {"id": "charge", "activity": "test.step", "input": "${input}", "timeout": "10s"},
        {"id": "ship", "activity": "test.step", "input": "${input}", "timeout": "10s"},
    ],
}
# Padding makes each start a few pages of WAL, so the disk fills after a few dozen starts, not thousands.
PAD = "p" * 6000


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs for the database, unmounted afterwards whatever happened."""
    if not mounting_allowed():
        if os.environ.get("CI") == "true":
            pytest.fail("the disk-full test needs root to mount a tmpfs, and CI runs as root")
        pytest.skip("mounting a tmpfs needs root")
    with small_disk(tmp_path / "disk", "8m") as where:
        yield where


def steps_done(engine: Engine, run_id: str) -> set[str]:
    shown = engine.show(run_id)
    return {key for key, step in shown["steps"].items() if step["status"] == "completed"}


def start(url: str, auth: dict[str, str], n: int) -> httpx.Response:
    body = {"definition": "disk", "input": {"n": n, "pad": PAD}}
    return httpx.post(f"{url}/v1/runs", json=body, headers=auth, timeout=30)


def test_disk_full_gives_503_loses_nothing_and_resumes_when_space_is_freed(
    tmp_path: Path, disk: Path, ledger: Ledger
) -> None:
    """Full disk: 503 + Retry-After, CLI exit 6, acknowledged runs kept, file sound, resumes once freed."""
    db_url = f"sqlite:///{disk / 'lockstep.db'}"
    engine = Engine.open(db_url)
    (tmp_path / "procs").mkdir()
    cluster = Cluster(tmp_path / "procs", db_url, ledger)
    try:
        svc = engine.service
        svc.principals.create_tenant("default")
        key = svc.principals.create_user("default", "ops", ["operator"], []).api_key
        auth = {"Authorization": f"Bearer {key}"}
        engine.publish(FLOW)
        api = cluster.serve("api", free_port())
        worker = cluster.worker("w1")
        acknowledged: list[str] = []
        for n in range(10):
            r = start(api.url, auth, n)
            assert r.status_code == 201, r.text
            acknowledged.append(r.json()["run_id"])

        filler = fill(disk)
        refused: httpx.Response | None = None
        deadline = time.monotonic() + 20
        while refused is None and time.monotonic() < deadline:
            r = start(api.url, auth, len(acknowledged))
            if r.status_code == 201:
                acknowledged.append(r.json()["run_id"])
            else:
                refused = r
        assert refused is not None, "the disk never filled up"
        assert refused.status_code == 503, refused.text
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert refused.headers["retry-after"] == "1"
        problem: dict[str, Any] = refused.json()
        assert problem["code"] == "unavailable"
        assert "is full" in problem["detail"], problem
        assert "free space" in problem["detail"], problem

        cli = cluster.cli("start", "disk", "--input", json.dumps({"pad": PAD}), expect=6)
        assert "is full" in cli.stderr, cli.stderr
        assert "Traceback" not in cli.stderr + cli.stdout
        # What had completed before the disk filled: it must stay completed.
        before = {run: steps_done(engine, run) for run in acknowledged}
        assert api.alive()
        assert worker.alive()

        filler.unlink()
        resumed = start(api.url, auth, len(acknowledged))
        assert resumed.status_code == 201, resumed.text  # no restart: the same processes go on
        acknowledged.append(resumed.json()["run_id"])

        def all_completed() -> bool:
            return all(engine.show(run)["status"] == "completed" for run in acknowledged)

        wait_until(all_completed, 25, "every acknowledged run to complete")
        for run, done in before.items():
            assert done <= steps_done(engine, run), run
        assert api.alive()
        assert worker.alive()
        assert "is full" in worker.log(), "the worker never met the full disk"
        with closing(sqlite3.connect(disk / "lockstep.db")) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        report = json.loads(cluster.cli("verify", "--json").stdout)
        assert report["ok"], report
        assert report["runs"] == len(acknowledged), report
    finally:
        cluster.shutdown()
        engine.close()
