"""A run the background scrub marked damaged, over HTTP: its view and history still answer, saying it
is refused as damaged; a command on it is a 409 corrupt_run problem naming the problem and `verify`."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from lockstep.engine import Engine

from .conftest import Api, assert_problem

pytestmark = pytest.mark.anyio

NAP = {"name": "nap", "steps": [{"id": "nap", "wait": "1h"}]}


def flip_started_input(path: Path, run_id: str) -> None:
    """One letter of the run's RunStarted data changed past the append-only trigger (still JSON)."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("DROP TRIGGER events_append_only_update")
        sql = "UPDATE events SET data = replace(data, '\"abc\"', '\"abb\"') WHERE run_id = ? AND seq = 1"
        assert conn.execute(sql, (run_id,)).rowcount == 1


async def test_a_marked_run_is_shown_as_refused_and_its_commands_are_409(
    api: Api, engine: Engine, db_path: Path
) -> None:
    """GET the run: 200 with `damaged` and a "refused" reason, no wait; its events: 200; cancel: 409
    corrupt_run whose detail names the broken seq and `lockstep verify`; a sound run is unaffected."""
    engine.service.publish("acme", NAP)
    bad = await api.start_ok("nap", {"m": "abc"})
    sound = await api.start_ok("nap", {"m": "abc"})
    flip_started_input(db_path, bad)
    assert engine.service.scrub.run_pass().damaged == [bad]

    shown = await api.run(bad)
    assert "hash chain broken at seq 1" in shown["damaged"]
    assert shown["wait_kind"] is None
    assert shown["wait_reason"].startswith("refused: ")
    assert "damaged" not in await api.run(sound)
    assert [e["seq"] for e in await api.events(bad)] == [1, 2]  # RunStarted, TimerScheduled

    r = await api.c.post(f"/v1/runs/{bad}/cancel", json={"reason": "stop"}, headers=api.t.auth("operator"))
    problem = assert_problem(r, 409, "corrupt_run")
    assert "hash chain broken at seq 1" in problem["detail"]
    assert f"lockstep verify {bad}" in problem["detail"]
    ok = await api.c.post(f"/v1/runs/{sound}/cancel", json={"reason": "stop"}, headers=api.t.auth("operator"))
    assert ok.status_code == 200, ok.text
