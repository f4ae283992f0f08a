"""Per-tenant limits on values (core/limits.py), enforced in the service so the Python API, the CLI and
HTTP all get them, on both backends: refusals name the limit and write nothing; an over-limit activity
output fails its attempt without a retry; values stored before the limits still show everywhere."""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from typing import Any

import pytest
from click.testing import CliRunner

import lockstep
from lab import clifork
from lockstep import Engine, Registry
from lockstep.app.principals import Principal, Principals
from lockstep.app.service import Service, new_run_id
from lockstep.cli import cli
from lockstep.core.commands import StartRun
from lockstep.errors import InvalidInput

from .conftest import NAP, ORDER, Raw

T = "acme"
LEASE = timedelta(seconds=30)


def nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


@pytest.fixture
def tenant(svc: Service) -> Principals:
    principals = svc.principals
    principals.create_tenant(T)
    svc.publish(T, NAP)
    svc.publish(T, ORDER)
    return principals


def totals(raw: Raw) -> dict[str, int]:
    return {t: raw.count(t) for t in ("runs", "events", "tasks", "timers")}


@pytest.mark.parametrize(
    ("value", "code", "limit"),
    [
        ({"blob": "x" * 300_000}, "too_large", "max_input_bytes=262144"),
        ({"x": nested(33)}, "too_deep", "max_json_depth=32"),
        ({"x": nested(500)}, "too_deep", "max_json_depth=32"),
        ({"items": list(range(1001))}, "too_many_items", "max_list_items=1000"),
        ({f"k{i}": i for i in range(1001)}, "too_many_items", "max_list_items=1000"),
    ],
    ids=["bytes", "depth", "depth-past-ceiling", "list", "object"],
)
def test_start_over_a_limit_is_refused_naming_it_and_writes_nothing(
    svc: Service, tenant: Principals, raw: Raw, value: Any, code: str, limit: str
) -> None:
    """Service.start and start_many refuse an input over a limit, naming it; nothing is written."""
    before = totals(raw)
    with pytest.raises(InvalidInput) as refused:
        svc.start(T, "nap", input=value, key="k1")
    assert refused.value.code == code
    assert limit in str(refused.value)
    with pytest.raises(InvalidInput) as batch:
        svc.start_many(T, "nap", [{"fine": 1}, value])
    assert batch.value.code == code
    assert totals(raw) == before
    assert svc.start(T, "nap", input={"fine": 1}, key="k1").created  # the key was not consumed


def test_a_raised_limit_takes_effect_and_ceilings_hold(svc: Service, tenant: Principals) -> None:
    """Raising max_json_depth admits deeper inputs at once; no setting may pass its ceiling."""
    with pytest.raises(InvalidInput):
        svc.start(T, "nap", input={"x": nested(40)})
    tenant.set_tenant(T, max_json_depth=48)
    assert svc.start(T, "nap", input={"x": nested(40)}).created
    for bad in ({"max_json_depth": 65}, {"max_list_items": 10_001}, {"max_input_bytes": 1.5}):
        with pytest.raises(InvalidInput, match="at most"):
            tenant.set_tenant(T, **bad)
    result = CliRunner().invoke(cli, ["--db", svc.store.url, "tenants", "set", T, "--max-json-depth", "65"])
    assert result.exit_code == 2
    assert "1<=x<=64" in result.output


def _leased(svc: Service, activity: str = "inventory.reserve") -> Any:
    [lease] = svc.claim("w1", [activity], limit=1, lease_ttl=LEASE)
    return lease


def test_in_process_huge_output_fails_the_attempt_without_retry(svc: Service, tenant: Principals) -> None:
    """An in-process worker's 300 KB output (report_and_claim): attempt failed output_too_large, no retry."""
    run_id = svc.start(T, "order", input={"order": 1}).run_id
    lease = _leased(svc)
    report = svc.success_report(lease.task_id, lease.attempt, lease.fencing, {"blob": "x" * 300_000})
    verdicts, _ = svc.report_and_claim([report], "w1", [], limit=0, lease_ttl=LEASE)
    assert verdicts == ["accepted"]
    shown = svc.show(T, run_id)
    assert shown.steps["reserve"].attempts == 1
    assert shown.steps["reserve"].error["code"] == "output_too_large"
    assert "max_output_bytes" in shown.steps["reserve"].error["message"]
    assert shown.status in ("failed", "compensating")
    assert svc.claim("w1", ["inventory.reserve"], limit=5, lease_ttl=LEASE) == []


def test_python_api_complete_with_a_deep_output_is_told_and_recorded(
    svc: Service, tenant: Principals
) -> None:
    """Service.complete with a 40-deep output records the failure and raises output_too_large."""
    run_id = svc.start(T, "order", input={"order": 1}).run_id
    lease = _leased(svc)
    with pytest.raises(InvalidInput) as told:
        svc.complete(lease.task_id, lease.attempt, lease.fencing, nested(40), tenant=T)
    assert told.value.code == "output_too_large"
    assert "max_json_depth" in str(told.value)
    assert svc.show(T, run_id).steps["reserve"].error["code"] == "output_too_large"


def test_an_error_message_is_cut_to_fit_max_output_bytes(svc: Service, tenant: Principals) -> None:
    """A failure's message longer than max_output_bytes allows is cut (a failure is always recordable)."""
    tenant.set_tenant(T, max_output_bytes=300)
    run_id = svc.start(T, "order", input={"order": 1}).run_id
    lease = _leased(svc)
    assert svc.fail(lease.task_id, lease.attempt, lease.fencing, "Boom", "é" * 1900, tenant=T) == "accepted"
    error = svc.show(T, run_id).steps["reserve"].error
    assert error["code"] == "Boom"
    assert error["message"].endswith("(cut to fit max_output_bytes)")
    assert len(json.dumps(error, ensure_ascii=False, separators=(",", ":")).encode()) <= 300


def test_operator_and_approver_payloads_are_bounded(svc: Service, tenant: Principals, raw: Raw) -> None:
    """edit-input over max_list_items, a reason over max_payload_bytes and an approval comment over it
    are refused naming the limit, and write nothing to the run."""
    run_id = svc.start(T, "nap", input={"a": 1}).run_id
    before = totals(raw)
    repairs = svc.repairs
    with pytest.raises(InvalidInput, match="max_list_items"):
        repairs.edit_input(T, run_id, {"items": list(range(1001))}, "fix")
    with pytest.raises(InvalidInput, match="max_payload_bytes"):
        repairs.pause(T, run_id, "x" * 70_000)
    with pytest.raises(InvalidInput, match="max_payload_bytes"):
        svc.cancel(T, run_id, "y" * 70_000)
    approver = Principal(T, "ann", ("approver",), ())
    with pytest.raises(InvalidInput, match="max_payload_bytes"):
        svc.approvals.decide(approver, "t" * 43, "approve", "z" * 70_000)
    assert totals(raw) == before
    assert svc.show(T, run_id).status == "waiting"


def legacy_run(svc: Service, input: Any) -> str:
    """A run stored with an input no limit accepts today, as the code before the limits wrote it."""
    now = svc.clock()
    with svc.write() as tx:
        row = tx.definition(T, "nap", None)
        assert row is not None
        run_id = new_run_id(now)
        d = svc.definition_for(tx, T, "nap", row.version)
        svc.apply(tx, None, StartRun(run_id, T, row.version, input), now, d)
    return run_id


def _depth(value: Any) -> tuple[int, Any]:
    depth = 0
    while isinstance(value, list):
        value, depth = value[0], depth + 1
    return depth, value


def test_a_stored_deep_run_still_shows_everywhere(svc: Service, tenant: Principals) -> None:
    """A run stored 700 deep lists, shows and streams its events (service and CLI), clipped at 64 levels."""
    run_id = legacy_run(svc, {"x": nested(700)})
    marker = "[not shown: nested deeper than 64 levels]"
    assert _depth(svc.show(T, run_id).input["x"]) == (63, marker)
    [listed] = [r for r in svc.runs(T, before="") if r.run_id == run_id]
    assert _depth(listed.input["x"]) == (63, marker)
    assert _depth(svc.events(T, run_id)[0].data["input"]["x"])[1] == marker
    assert svc.verify(run_id)[0].ok
    base = [sys.executable, "-m", "lockstep", "--db", svc.store.url, "--tenant", T]
    for args in (["show", run_id], ["events", run_id], ["runs"]):
        for fmt in ([], ["--json"]):
            done = clifork.run([*base, *args, *fmt], capture_output=True, text=True, timeout=120, check=False)
            assert done.returncode == 0, (args, done.stderr)
            assert run_id in done.stdout or args[0] == "events"
            if fmt and args[0] != "runs":
                assert marker in done.stdout


def test_a_real_worker_returning_a_huge_output_fails_once_and_stops(db_url: str) -> None:
    """An in-process Worker whose activity returns 2 MB: one attempt, failed output_too_large, run failed."""
    reg = Registry()
    calls: list[int] = []

    @lockstep.activity("big.fetch", registry=reg)
    def fetch(payload: dict[str, Any], ctx: Any) -> dict[str, Any]:
        calls.append(ctx.attempt)
        return {"rows": "r" * 2_000_000}

    engine = Engine.open(db_url)
    try:
        step = {"id": "fetch", "activity": "big.fetch", "timeout": "5s"}
        engine.publish(
            {"name": "big", "steps": [{**step, "retry": {"max_attempts": 5, "initial_interval": "10ms"}}]}
        )
        run = engine.start("big", input={})
        worker = engine.worker(reg, lease_ttl=timedelta(seconds=2), concurrency=1).start()
        try:
            shown = engine.wait_for(run, timeout=15)
        finally:
            worker.stop(timeout=10)
        assert shown["status"] == "failed", shown
        assert shown["steps"]["fetch"]["error"]["code"] == "output_too_large"
        assert shown["steps"]["fetch"]["attempts"] == 1
        assert calls == [1]
    finally:
        engine.close()
