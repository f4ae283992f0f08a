"""The trust boundary of traces, as an attack (both backends): a tenant puts a secret everywhere a run
carries tenant data (the input, an activity's output, an error message, the reason an operator is
called, the output an operator resolves with, an approval's details, an approver's comment) in a
definition that declares NOTHING sensitive, so every one of them is stored in clear. None may reach a
span's name, attribute or event: a span carries ids, names, codes and counts, never a value."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tracekit import assert_clean, by_name, from_memory, in_memory, tree_problems

from lab.fleet import wait_until
from lockstep import ActivityError, Engine, Registry

SECRET = "SECRET-BILBY-9931"  # noqa: S105 - a made-up secret
LEAKY: dict[str, Any] = {
    "name": "leaky",
    "steps": [
        {"id": "echo", "activity": "x.echo", "input": {"v": "${input.secret}"}, "timeout": "10s"},
        {"id": "pay", "activity": "x.crash", "delivery": "at_most_once", "timeout": "10s"},
        {
            "id": "review",
            "approval": {
                "approvers": {"users": ["alice"]},
                "timeout": "1h",
                "details": "pay ${input.secret} to ${steps.echo.output.v}",
            },
        },
        {"id": "decline", "activity": "x.decline", "timeout": "10s", "retry": {"max_attempts": 1}},
    ],
}


def registry() -> Registry:
    reg = Registry()
    reg.register("x.echo", lambda data: {"v": data["v"], "again": f"{data['v']}!"})

    def crash(data: Any) -> Any:
        raise RuntimeError(f"connection reset while paying {SECRET}")  # outcome unknown

    def decline(data: Any) -> Any:
        raise ActivityError("Declined", f"the bank refused {SECRET}", retryable=False)

    reg.register("x.crash", crash)
    reg.register("x.decline", decline)
    return reg


def test_no_tenant_value_reaches_a_span_even_when_nothing_is_declared_sensitive(
    db_url: str, tmp_path: Path
) -> None:
    """The secret is in the stored history seven ways, and in no span of the run's trace."""
    tracing, exporter = in_memory()
    with Engine.open(db_url, tracing=tracing) as engine:
        svc = engine.service
        svc.principals.create_tenant("acme")
        svc.principals.create_user("acme", "alice", ["approver"], [])
        engine.publish(LEAKY, tenant="acme")
        worker = engine.worker(registry()).start()
        try:
            run_id = engine.start("leaky", input={"secret": SECRET}, tenant="acme")
            assert engine.wait_for(run_id, tenant="acme")["status"] == "needs_attention"
            svc.repairs.resolve(
                "acme",
                run_id,
                "pay",
                "succeeded",
                "checked with the bank",
                output={"paid": SECRET},
                actor="ops",
            )
            wait_until(lambda: engine.show(run_id, tenant="acme")["wait_kind"] == "approval", 30, "approval")
            alice = svc.principals.principal("acme", "alice")
            assert alice is not None
            svc.approvals.decide_in_session(alice, run_id, "review", "approve", f"fine, {SECRET}")
            assert engine.wait_for(run_id, tenant="acme")["status"] == "failed"
        finally:
            worker.stop()
        with svc.read() as tx:
            history = [e.to_json() for e, _ in tx.events(run_id)]
    stored = json.dumps(history)
    places = ["RunStarted", "ActivitySucceeded", "NeedsAttention", "StepResolved", "ApprovalRequested"]
    places += ["ApprovalDecisionRecorded", "ActivityFailed"]
    for kind in places:
        assert any(e["type"] == kind and SECRET in json.dumps(e) for e in history), kind
    assert SECRET in stored
    spans = from_memory(exporter.get_finished_spans())
    assert tree_problems(spans) == []
    assert by_name(spans, "needs attention")[0].attributes["lockstep.code"]
    assert by_name(spans, "operator resolve")[0].attributes["lockstep.reason"] == "checked with the bank"
    assert assert_clean(spans, (SECRET,)) > 100


def test_an_error_code_is_carried_as_given_and_documented_as_clear(db_url: str) -> None:
    """Codes are identifiers the activity chooses (they are metric labels too): carried as they are,
    which docs/security.md states, so an author knows never to put a value in one."""
    tracing, exporter = in_memory()
    reg = Registry()

    def fail(data: Any) -> Any:
        raise ActivityError("CardExpired", "expired", retryable=False)

    reg.register("x.decline", fail)
    one = {"name": "one", "steps": [{"id": "s", "activity": "x.decline", "timeout": "10s"}]}
    with Engine.open(db_url, tracing=tracing) as engine:
        engine.publish(one)
        worker = engine.worker(reg).start()
        try:
            engine.wait_for(engine.start("one"))
        finally:
            worker.stop()
    (attempt,) = by_name(from_memory(exporter.get_finished_spans()), "attempt x.decline")
    assert attempt.attributes["lockstep.error_code"] == "CardExpired"
    assert attempt.status_message == "CardExpired"
    assert all("expired" not in str(v) for v in attempt.attributes.values())
    security = (Path(__file__).parents[2] / "docs" / "security.md").read_text()
    assert "## Traces" in security
    assert "error codes" in security.split("## Traces", 1)[1]
