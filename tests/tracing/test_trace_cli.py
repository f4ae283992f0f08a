"""`lockstep trace RUN`: the run's spans derived from its history, printed as a tree, and with
`--export` sent to the collector the OTEL_* variables name, with the ids and times the live processes
gave them (what a killed process never exported is filled in); `lockstep start --traceparent`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from lab import clifork
from lab.fleet.otlp import otlp_receiver
from lockstep import Engine, Registry
from lockstep.app.tracing import history_spans

PLAIN = {
    "name": "plain",
    "steps": [{"id": "a", "activity": "x.a", "timeout": "10s"}, {"id": "w", "wait": "20ms"}],
}


def lockstep(db: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return clifork.run(
        [sys.executable, "-m", "lockstep", "--db", db, *args],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def finished_run(db: str, **start: Any) -> str:
    reg = Registry()
    reg.register("x.a", lambda data: {"ok": True})
    with Engine.open(db, tracing=False) as engine:
        engine.publish(PLAIN)
        worker = engine.worker(reg).start()
        try:
            run_id = engine.start("plain", **start)
            assert engine.wait_for(run_id)["status"] == "completed"
        finally:
            worker.stop()
    return run_id


def test_trace_prints_the_tree_and_exports_the_historys_spans(tmp_path: Path) -> None:
    """Re-sent spans are exactly those the history implies (ids, parents, times), every one of them."""
    db = f"sqlite:///{tmp_path / 'db'}"
    run_id = finished_run(db)
    shown = lockstep(db, "trace", run_id)
    assert shown.returncode == 0, shown.stderr
    assert "run plain" in shown.stdout
    assert "attempt x.a" in shown.stdout
    with otlp_receiver() as receiver:
        done = lockstep(db, "trace", run_id, "--export", env=receiver.env())
        assert done.returncode == 0, done.stderr
        got = receiver.received()  # the CLI flushed before it exited
    with Engine.open(db, tracing=False) as engine, engine.service.read() as tx:
        derived = history_spans([e for e, _ in tx.events(run_id)])
    assert sorted((s.span_id, s.parent_id, s.name) for s in got) == sorted(
        (f"{r.span_id:016x}", f"{r.parent_id:016x}" if r.parent_id else None, r.name) for r in derived
    )
    as_json = json.loads(lockstep(db, "trace", run_id, "--json").stdout)
    assert {s["span_id"] for s in as_json} == {s.span_id for s in got}


def test_trace_export_without_tracing_and_an_unknown_run_are_refused(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'db'}"
    run_id = finished_run(db)
    no_otel = lockstep(db, "trace", run_id, "--export")
    assert no_otel.returncode == 2
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in no_otel.stderr
    other = lockstep(db, "--tenant", "other", "trace", run_id)
    assert other.returncode == 3  # another tenant's run is not found
    assert "Traceback" not in other.stderr + no_otel.stderr


def test_start_with_a_traceparent_joins_the_callers_trace_and_refuses_a_bad_one(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'db'}"
    with Engine.open(db, tracing=False) as engine:
        engine.publish(PLAIN)
    caller = "00-aaaabbbbccccddddeeeeffff00001111-1234567890abcdef-01"
    ok = lockstep(db, "start", "plain", env={"TRACEPARENT": caller})
    assert ok.returncode == 0, ok.stderr
    run_id = json.loads(ok.stdout)["run_id"]
    with Engine.open(db, tracing=False) as engine, engine.service.read() as tx:
        data = tx.events(run_id)[0][0].data_json()
    assert data["trace"].split("-")[1] == "aaaabbbbccccddddeeeeffff00001111"
    assert data["trace_parent"] == "1234567890abcdef"
    bad = lockstep(db, "start", "plain", "--traceparent", "00-xyz")
    assert bad.returncode == 2
    assert "W3C traceparent" in bad.stderr
